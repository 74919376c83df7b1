package host_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// snapExt records the snapshot each Activate was handed.
type snapExt struct {
	name string
	caps []ext.Capability

	mu    sync.Mutex
	snaps map[string]*ext.UserSnapshot // by user, the last
	n     int                          // activations
}

func (e *snapExt) Describe(context.Context) (*ext.Descriptor, error) {
	form := json.RawMessage(`{"v":1,"root":{"type":"form","children":[{"type":"text","name":"greeting"}]}}`)
	return &ext.Descriptor{Name: e.name, Capabilities: e.caps, Settings: []ext.SettingsSection{
		{ID: "prefs", Title: "Prefs", Scope: "user", Form: form},
		{ID: "site", Title: "Site", Scope: "system", Form: form},
	}}, nil
}
func (e *snapExt) Configure(context.Context, *ext.ConfigureRequest) error { return nil }
func (e *snapExt) Shutdown(context.Context) error                         { return nil }
func (e *snapExt) Retire(context.Context, string, string) error           { return nil }
func (e *snapExt) ReconcileAll(context.Context) error                     { return nil }
func (e *snapExt) Activate(ctx context.Context, user string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.snaps == nil {
		e.snaps = map[string]*ext.UserSnapshot{}
	}
	e.snaps[user] = ext.ActivationSnapshot(ctx)
	e.n++
	return nil
}

func (e *snapExt) last(user string) (*ext.UserSnapshot, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snaps[user], e.n
}

// TestActivateHandsTheSnapshot: an extension that lists the snapshot
// capability is handed, with Activate, the user's values of each of its
// user sections and the user's secrets for it (not another user's, not
// another extension's), read afresh on each activation; one that does not
// list it is handed nothing (it reads through its store as before).
func TestActivateHandsTheSnapshot(t *testing.T) {
	ctx := context.Background()
	snap := &snapExt{name: "snap", caps: []ext.Capability{ext.CapabilityUsers, ext.CapabilitySnapshot}}
	plain := &snapExt{name: "plain", caps: []ext.Capability{ext.CapabilityUsers}}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Logger: testLogger(t), Extensions: map[string]host.InProcess{"snap": {Extension: snap}, "plain": {Extension: plain}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	for _, w := range []struct{ user, ext, v string }{{"alice", "snap", "hi"}, {"bob", "snap", "yo"}, {"alice", "plain", "hey"}} {
		if err := h.SetSettings(ctx, w.user, w.ext, "prefs", json.RawMessage(`{"greeting":"`+w.v+`"}`)); err != nil {
			t.Fatal(err)
		}
		if err := h.SetSecret(ctx, w.user, w.ext, "token", "tok-"+w.v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Tools(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	want := &ext.UserSnapshot{
		Settings: map[string]json.RawMessage{"prefs": json.RawMessage(`{"greeting":"hi"}`)},
		Secrets:  map[string]string{"token": "tok-hi"},
	}
	if got, _ := snap.last("alice"); !reflect.DeepEqual(got, want) {
		t.Errorf("alice's snapshot: %+v, want %+v", got, want)
	}
	if got, n := plain.last("alice"); got != nil || n == 0 {
		t.Errorf("an extension without the capability was activated %d times, handed %+v; want activated, handed nil", n, got)
	}
	// A change activates her again, with the new value.
	if err := h.SetSecret(ctx, "alice", "snap", "token", "tok-new"); err != nil {
		t.Fatal(err)
	}
	want.Secrets["token"] = "tok-new"
	if got, _ := snap.last("alice"); !reflect.DeepEqual(got, want) {
		t.Errorf("alice's snapshot after her secret changed: %+v, want %+v", got, want)
	}
}
