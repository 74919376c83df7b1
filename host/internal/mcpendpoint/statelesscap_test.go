package mcpendpoint_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// TestStatelessOpenRequestsCap: a user's requests open at once on the
// stateless revision are capped over all the user's tokens (SECURITY: a
// listen stream or a slow call each hold one): one more is refused at once
// with 429, Retry-After and the rate-limit error naming the cap, logged
// once however often it is refused; another user is not affected; once a
// request ends, the user's next one runs.
func TestStatelessOpenRequestsCap(t *testing.T) {
	logs := &hosttest.LogBuffer{}
	e := newEnv(t, &mcpendpoint.Options{MaxOpenPerUser: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		if req.User == "alice" && req.Name == "notes/add" {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return ext.TextResult("ok " + req.User), nil
	})
	call := func(tok, name string) answer {
		return readAnswer(t, e.rawPost(t, tok, "", statelessCall("1", name, `{}`), statelessHeaders(name)))
	}
	// Two calls held open, by two tokens of alice's.
	var wg sync.WaitGroup
	held := make([]answer, 2)
	for i, tok := range []string{aliceTok, alice2Tok} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i] = call(tok, "notes__add")
		}()
	}
	<-started
	<-started
	for range 3 {
		got := call(aliceTok, "notes__list")
		msg, _ := got.message.(map[string]any)
		rerr, _ := msg["error"].(map[string]any)
		data, _ := rerr["data"].(map[string]any)
		if got.status != http.StatusTooManyRequests || got.headers["Retry-After"] != "1" || rerr["code"] != float64(-32029) ||
			!strings.Contains(fmt.Sprint(rerr["message"]), "at most 2 open requests") || data["scope"] != "user" || data["kind"] != "concurrency" {
			t.Fatalf("alice's third open request: %d %v %v, want 429 with Retry-After 1 and -32029 naming the cap", got.status, got.headers, got.message)
		}
	}
	if got := call(alice2Tok, "notes__list"); got.status != http.StatusTooManyRequests {
		t.Errorf("alice's other token: %d, want 429 (the cap is the user's)", got.status)
	}
	if got := call(bobTok, "web__fetch"); got.status != http.StatusOK || !strings.Contains(fmt.Sprint(got.message), "ok bob") {
		t.Errorf("bob, while alice is at her cap: %d %v", got.status, got.message)
	}
	if n := strings.Count(logs.String(), "at the cap"); n != 1 {
		t.Errorf("%d log lines for four refusals, want 1:\n%s", n, logs)
	}
	close(release)
	wg.Wait()
	for _, a := range held {
		if !strings.Contains(fmt.Sprint(a.message), "ok alice") {
			t.Errorf("a held call answered %v", a.message)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := call(aliceTok, "notes__list")
		if got.status == http.StatusOK && strings.Contains(fmt.Sprint(got.message), "ok alice") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's request after hers ended: %d %v", got.status, got.message)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStatelessListenStreamsCount: a go-sdk client's listen streams on the
// stateless revision are open requests of its user and count against the
// cap; when one ends, the user's requests run again.
func TestStatelessListenStreamsCount(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{MaxOpenPerUser: 2})
	e.host.SetCatalog("alice", hosttest.Catalog{Resources: []api.Resource{
		{Resource: ext.Resource{URI: "notes://alice/a"}}, {Resource: ext.Resource{URI: "notes://alice/b"}}}})
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		return ext.TextResult("ok " + req.User), nil
	})
	call := func(tok, name string) answer {
		return readAnswer(t, e.rawPost(t, tok, "", statelessCall("1", name, `{}`), statelessHeaders(name)))
	}
	cs := e.session(t, aliceTok, "", &mcp.ClientOptions{})
	for _, uri := range []string{"notes://alice/a", "notes://alice/b"} {
		if err := cs.Subscribe(tctx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the listen stream of "+uri, func() bool { return e.host.ResourceSubscribers("alice")[uri] == 1 })
	}
	if got := call(alice2Tok, "notes__list"); got.status != http.StatusTooManyRequests {
		t.Fatalf("alice's call beside her two listen streams: %d %v, want 429", got.status, got.message)
	}
	if got := call(bobTok, "web__fetch"); got.status != http.StatusOK {
		t.Errorf("bob: %d %v", got.status, got.message)
	}
	if err := cs.Unsubscribe(tctx(t), &mcp.UnsubscribeParams{URI: "notes://alice/a"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice's call after one stream ended", func() bool { return call(alice2Tok, "notes__list").status == http.StatusOK })
}
