package host_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// TestBuildInfo: the build information names the version, the commit
// (shortened, marked when the tree had changes), the commit's date and the
// toolchain, and the overview (/status.json) carries them with the
// extension protocol version.
func TestBuildInfo(t *testing.T) {
	b := host.BuildInfo{Version: "v1.2.3", Commit: "0123456789abcdef0123", Modified: true,
		Date: time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC), GoVersion: "go1.26.8"}
	if got, want := b.String(), "v1.2.3 (commit 0123456789ab+changes, 2026-12-01, go1.26.8)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (host.BuildInfo{Version: "dev"}).String(); got != "dev" {
		t.Errorf("without a stamp: %q", got)
	}
	own := host.Build()
	if own.Version == "" || own.GoVersion != runtime.Version() {
		t.Errorf("Build() = %+v", own)
	}
	h, err := host.New(context.Background(), testConfig(t.TempDir(), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	o, err := h.Overview(context.Background())
	if err != nil || o.Version != own.Version || o.Commit != own.Commit || o.ExtProtocol != ext.ProtocolVersion {
		t.Errorf("overview %+v %v; want the build's version and commit and protocol %d", o, err, ext.ProtocolVersion)
	}
	if !strings.HasPrefix(own.String(), own.Version) {
		t.Errorf("%q does not start with the version", own.String())
	}
}
