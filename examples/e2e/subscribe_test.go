package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStatelessResourceSubscription: a go-sdk client at its default
// revision (2026-07-28: no session; a subscription is a subscriptions/listen
// stream) subscribes to alice's notes://notes on /mcp and receives
// notifications/resources/updated when a note is added; a token scoped to
// another server may not subscribe to it.
func TestStatelessResourceSubscription(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes": map[string]any{"command": b.notes, "args": []string{"-resource"}},
		"other": map[string]any{"command": b.notes},
	}}, nil)
	e.startServe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A token scoped to other subscribes to notes's resource first: go-sdk
	// does not report the refusal (Subscribe only opens the stream), so
	// the test checks it hears nothing of what the full token hears.
	scopedHeard := make(chan string, 16)
	scoped := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "other", "--servers", "other"))
	sc, err := connectWith(t, e.url, scoped, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			scopedHeard <- req.Params.URI
		},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	_ = sc.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "notes://notes"})

	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "sub"))
	updated := make(chan string, 16)
	c, err := connectWith(t, e.url, tok, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "notes://notes"}); err != nil {
		t.Fatalf("subscribing at go-sdk's default revision: %v", err)
	}
	for _, text := range []string{"hello", "again"} {
		e.must("", "call", "--user", "alice", "notes/add_note", `{"text":"`+text+`"}`)
		select {
		case uri := <-updated:
			if uri != "notes://notes" {
				t.Errorf("updated %q, want notes://notes", uri)
			}
		case <-ctx.Done():
			t.Fatal("no notifications/resources/updated reached the subscribed client")
		}
	}
	select {
	case uri := <-scopedHeard:
		t.Errorf("a token scoped to other heard that %s was updated", uri)
	default:
	}
}
