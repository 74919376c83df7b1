package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// TestReloadRefusesWhatCannotChangeInPlace: each block with no in-place
// rule (services, audit, publicURL, an extension added) is refused by
// name, all of them at once, wrapping ErrInvalidArgument; an unchanged
// file reloads with nothing changed; a host not started from a file
// cannot reload.
func TestReloadRefusesWhatCannotChangeInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "agenthost.json")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"dataDir": "data", "secrets": {"backend": "memory"}, "extensions": {}}`)
	cfg, err := host.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	res, err := h.Reload(context.Background())
	if err != nil || len(res.Changed) != 0 {
		t.Fatalf("reloading the same file: %+v, %v; want nothing changed", res, err)
	}
	write(`{"dataDir": "data", "secrets": {"backend": "memory"}, "services": {"idleMinutes": 1}, "audit": {"off": true},
		"publicURL": "https://example.test", "extensions": {"x": {"path": "/bin/true"}}}`)
	_, err = h.Reload(context.Background())
	if !errors.Is(err, ext.ErrInvalidArgument) {
		t.Fatalf("reload: %v; want invalid argument", err)
	}
	for _, want := range []string{"services: cannot change", "audit: cannot change", "publicURL: cannot change", "extensions.x: adding an extension"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("reload error %q does not name %q", err, want)
		}
	}
	// Nothing changed: the same first file reloads as unchanged.
	write(`{"dataDir": "data", "secrets": {"backend": "memory"}, "extensions": {}}`)
	if res, err := h.Reload(context.Background()); err != nil || len(res.Changed) != 0 {
		t.Errorf("after the refusal: %+v, %v", res, err)
	}

	embedded, err := host.New(context.Background(), &host.Config{DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer embedded.Close()
	if _, err := embedded.Reload(context.Background()); !errors.Is(err, ext.ErrUnimplemented) {
		t.Errorf("reload of a host with no file: %v; want unimplemented", err)
	}
}
