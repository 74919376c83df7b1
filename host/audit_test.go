package host_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/host"
)

// TestAuditRecordsCalls: every call through the host's call path leaves
// one record with the user, server, tool, the hash of the tool's
// definition and the outcome; a refused call says why; a user's filter
// returns that user's records only; without bodies turned on, no
// arguments are kept.
func TestAuditRecordsCalls(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, err := host.New(ctx, &host.Config{DataDir: dir}, &host.Options{
		Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tools, err := h.Tools(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(ctx, "alice", "", "t/echo", json.RawMessage(`{"secret":"s3cr3t"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(ctx, "bob", "", "t/nope", nil); err == nil {
		t.Fatal("calling an unknown tool succeeded")
	}
	all, err := h.Audit(ctx, host.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("records = %+v, want 2", all)
	}
	a, b := all[0], all[1]
	var wantHash string
	for _, tl := range tools {
		if tl.Name == "t/echo" {
			wantHash = host.AuditHash(tl)
		}
	}
	if a.User != "alice" || a.Server != "t" || a.Tool != "t/echo" || a.Outcome != "ok" || a.ToolHash == "" || a.ToolHash != wantHash ||
		a.Credential != "api" || a.ReqBytes == 0 || a.ResBytes == 0 || a.Kind != "tool" {
		t.Errorf("alice's record = %+v (want hash %s)", a, wantHash)
	}
	if a.Arguments != "" || a.Result != "" {
		t.Errorf("bodies kept without audit.bodies: %+v", a)
	}
	if b.User != "bob" || b.Outcome != "refused" || !strings.Contains(b.Reason, "not found") {
		t.Errorf("bob's record = %+v", b)
	}
	mine, err := h.Audit(ctx, host.AuditFilter{User: "bob"})
	if err != nil || len(mine) != 1 || mine[0].User != "bob" {
		t.Errorf("bob's records = %+v, %v", mine, err)
	}
	if s := h.AuditStats(); s.Written != 2 || s.Dropped != 0 {
		t.Errorf("stats = %+v", s)
	}
	if fi, err := filepath.Glob(filepath.Join(dir, "audit.db")); err != nil || len(fi) != 1 {
		t.Errorf("audit.db not in the data folder: %v %v", fi, err)
	}
}

// TestAuditBodiesAndOff: bodies are kept (capped) only when turned on; with
// the log off, Audit says so.
func TestAuditBodiesAndOff(t *testing.T) {
	ctx := context.Background()
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Audit: host.AuditConfig{Bodies: true, BodyBytes: 8}}, &host.Options{
		Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Call(ctx, "alice", "", "t/echo", json.RawMessage(`{"text":"hello world"}`)); err != nil {
		t.Fatal(err)
	}
	recs, err := h.Audit(ctx, host.AuditFilter{})
	if err != nil || len(recs) != 1 || !strings.HasPrefix(recs[0].Arguments, `{"text":`) || !strings.Contains(recs[0].Arguments, "truncated") || recs[0].Result == "" {
		t.Errorf("records with bodies = %+v, %v", recs, err)
	}
	off, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Audit: host.AuditConfig{Off: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if _, err := off.Audit(ctx, host.AuditFilter{}); err == nil {
		t.Error("Audit with the log off succeeded")
	}
}

// TestAuditSettingsChanges: a settings change and a secret change are
// recorded by what changed, never the value.
func TestAuditSettingsChanges(t *testing.T) {
	ctx := context.Background()
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}}, &host.Options{
		Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"greeting":"canary-value"}`)); err != nil {
		t.Fatal(err)
	}
	if err := h.SetSecret(ctx, "alice", "t", "api_key", "canary-secret"); err != nil {
		t.Fatal(err)
	}
	recs, err := h.Audit(ctx, host.AuditFilter{Kind: "settings"})
	if err != nil || len(recs) != 2 {
		t.Fatalf("settings records = %+v, %v", recs, err)
	}
	if recs[0].Tool != "settings t/prefs" || recs[1].Tool != "secret set t/api_key" || recs[0].User != "alice" || recs[1].Outcome != "ok" {
		t.Errorf("records = %+v", recs)
	}
	b, _ := json.Marshal(recs)
	if strings.Contains(string(b), "canary") {
		t.Errorf("a value reached the audit log: %s", b)
	}
}
