package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// TestRateLimits: the operator's limits (parsed from the file) apply on
// the host's one call path: alice's loop is refused with a
// RateLimitError that matches ext.ErrBusy and says when to retry, while
// bob's calls go on; a group's override lifts the limit for its members
// (and follows a change of groups); the refusals are counted by kind and
// audited as refused, with the limit as the reason.
func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	cfg, err := host.ParseConfig([]byte(`{"dataDir": "data", "extensions": {}, "limits": {
		"user": {"perMinute": 5},
		"tools": {"t/slow": {"concurrent": 1}},
		"overrides": {"group:ops": {"user": {"perMinute": 1000}}}}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(ctx, cfg, &host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var refusal *host.RateLimitError
	ok := 0
	for range 8 {
		_, err := h.Call(ctx, "alice", "", "t/echo", nil)
		if err == nil {
			ok++
			continue
		}
		if !errors.As(err, &refusal) || !errors.Is(err, ext.ErrBusy) || !errors.Is(err, host.ErrRateLimited) {
			t.Fatalf("alice's call failed otherwise: %v", err)
		}
	}
	if ok != 5 || refusal == nil || refusal.Scope != "user" || refusal.RetryAfter <= 0 {
		t.Fatalf("alice: %d calls admitted (want 5), refusal %+v", ok, refusal)
	}
	if _, err := h.Call(ctx, "bob", "", "t/echo", nil); err != nil {
		t.Errorf("bob was refused by alice's loop: %v", err)
	}
	if err := h.SetUserGroups(ctx, "alice", []string{"ops"}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := h.Call(ctx, "alice", "", "t/echo", nil); err != nil {
			t.Fatalf("alice in group ops: %v", err)
		}
	}
	if got := h.RateLimited(); got["user_rate"] != 3 || got["tool_concurrency"] != 0 || len(got) != 6 {
		t.Errorf("RateLimited() = %v", got)
	}
	recs, err := h.Audit(ctx, host.AuditFilter{User: "alice", Outcome: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Tool != "t/echo" || recs[0].ToolHash == "" || !strings.HasPrefix(recs[0].Reason, "rate limit: at most 5 calls per minute") {
		t.Errorf("audited refusals: %+v", recs)
	}
}

// TestConcurrencyLimit: a second concurrent call of a slow tool is
// refused while the first runs, and the first finishes.
func TestConcurrencyLimit(t *testing.T) {
	ctx := context.Background()
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Limits: host.LimitsConfig{Set: host.LimitSet{
		Tools: map[string]host.Limit{"t/slow": {Concurrent: 1}}}}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Tools(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	blockCtx, unblock := context.WithCancel(ctx)
	defer unblock()
	first := make(chan error, 1)
	start := func() {
		go func() {
			_, err := h.Call(blockCtx, "alice", "", "t/slow", json.RawMessage(`{"millis": 600000}`))
			first <- err
		}()
	}
	start()
	var refusal *host.RateLimitError
	for i := 0; refusal == nil; i++ {
		if i == 10000 {
			t.Fatal("10,000 calls of t/slow ran beside a call of it in flight: no concurrency limit")
		}
		select {
		case err := <-first:
			// The first call came while a second one ran, and was
			// refused itself: start it again.
			if !errors.As(err, &refusal) {
				t.Fatalf("the first call: %v", err)
			}
			refusal = nil
			start()
		default:
		}
		_, err := h.Call(ctx, "alice", "", "t/slow", json.RawMessage(`{"millis": 0}`))
		if err != nil && !errors.As(err, &refusal) {
			t.Fatal(err)
		}
		// Admitted: the first call had not started yet. Try again.
	}
	if refusal.Scope != "tool" || refusal.Kind != "concurrency" || refusal.Subject != "t/slow" {
		t.Errorf("refusal %+v", refusal)
	}
	if _, err := h.Call(ctx, "bob", "", "t/slow", json.RawMessage(`{"millis": 0}`)); err != nil {
		t.Errorf("bob's call of the same tool: %v", err)
	}
	unblock()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("the first call: %v", err)
	}
	if _, err := h.Call(ctx, "alice", "", "t/slow", json.RawMessage(`{"millis": 0}`)); err != nil {
		t.Errorf("after the first ended: %v", err)
	}
}

// TestLimitsConfigErrors: errors name the field.
func TestLimitsConfigErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"user": {"perMinute": -1}}`:                            "limits.user.perMinute",
		`{"tools": {"notes": {"concurrent": 1}}}`:                `limits.tools["notes"]`,
		`{"users": {}}`:                                          `limits: unknown field "users"`,
		`{"overrides": {"group:ops": {"servers": {"a/b": {}}}}}`: `limits.overrides["group:ops"].servers["a/b"]`,
	} {
		_, err := host.ParseConfig([]byte(`{"extensions": {}, "limits": `+in+`}`), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

// TestUserActorRateLimited: an extension acting as a user
// (ext.UserActor) goes through the same limits as the user's own calls:
// its call takes from the user's bucket, and over it the extension gets
// ext.ErrBusy.
func TestUserActorRateLimited(t *testing.T) {
	ctx := context.Background()
	te := &testExt{}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"},
		Limits: host.LimitsConfig{Set: host.LimitSet{User: &host.Limit{PerMinute: 2}}}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: te, ActAsUsers: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	te.mu.Lock()
	ua := te.host.(ext.UserActor)
	te.mu.Unlock()
	if _, err := h.Call(ctx, "alice", "", "t/echo", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "t/echo"}); err != nil {
		t.Fatalf("CallToolAs within the limit: %v", err)
	}
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "t/echo"}); !errors.Is(err, ext.ErrBusy) || !errors.Is(err, host.ErrRateLimited) {
		t.Errorf("CallToolAs over alice's limit: %v, want ErrBusy", err)
	}
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "bob", Name: "t/echo"}); err != nil {
		t.Errorf("CallToolAs as bob: %v", err)
	}
}
