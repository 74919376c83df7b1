package host_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// TestHostSecrets: the host's own secrets of a user (the OpenID
// provider's refresh token) are stored, read and deleted apart from every
// extension's: the extension's secret of the same name is another, and
// its list does not show them; the operator's secrets of extensions read
// through OperatorSecret.
func TestHostSecrets(t *testing.T) {
	cfg := testConfig(t.TempDir(), nil)
	cfg.Secrets.Backend = "file"
	ctx := context.Background()
	h, err := host.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.HostSecret(ctx, "alice", "oidc-refresh-token"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("none yet: %v", err)
	}
	if err := h.SetHostSecret(ctx, "alice", "oidc-refresh-token", "rt-canary"); err != nil {
		t.Fatal(err)
	}
	if err := h.SetSecret(ctx, "alice", "t", "oidc-refresh-token", "ext-canary"); err != nil {
		t.Fatal(err)
	}
	if v, err := h.HostSecret(ctx, "alice", "oidc-refresh-token"); err != nil || v != "rt-canary" {
		t.Errorf("the host's secret: %q %v", v, err)
	}
	if names, _ := h.SecretNames(ctx, "alice", "t"); !slices.Equal(names, []string{"oidc-refresh-token"}) {
		t.Errorf("the extension's names: %q", names)
	}
	if err := h.DeleteHostSecret(ctx, "alice", "oidc-refresh-token"); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteHostSecret(ctx, "alice", "oidc-refresh-token"); err != nil {
		t.Errorf("deleting a missing one: %v", err)
	}
	if _, err := h.HostSecret(ctx, "alice", "oidc-refresh-token"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("after deleting: %v", err)
	}
	if names, _ := h.SecretNames(ctx, "alice", "t"); len(names) != 1 {
		t.Errorf("the extension's secret went too: %q", names)
	}
	if err := h.SetHostSecret(ctx, host.OperatorUser, "x", "y"); err == nil {
		t.Error("a host secret of the operator's reserved name")
	}
	if err := h.SetSecret(ctx, host.OperatorUser, "t", "oidc-client", "client-canary"); err != nil {
		t.Fatal(err)
	}
	if v, err := h.OperatorSecret(ctx, "t", "oidc-client"); err != nil || v != "client-canary" {
		t.Errorf("the operator's secret: %q %v", v, err)
	}
	if _, err := h.OperatorSecret(ctx, "nope", "oidc-client"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("an unknown extension: %v", err)
	}
}
