package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or, with NOTES_TEST_SERVE=1, this binary as the
// notes server itself (so the subprocess tests need no separate build).
func TestMain(m *testing.M) {
	if os.Getenv("NOTES_TEST_SERVE") == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// connect returns a client session to a notes server for token, in memory.
func connect(t *testing.T, token string, reveal bool) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := newServer(token, reveal).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

func callJSON(t *testing.T, cs *mcp.ClientSession, tool string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("decoding %s: %v", tool, err)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestNotesPerToken(t *testing.T) {
	t.Parallel()
	cs := connect(t, "tok-alice", false)
	var add addNoteOut
	callJSON(t, cs, "add_note", map[string]any{"text": "one"}, &add)
	callJSON(t, cs, "add_note", map[string]any{"text": "two"}, &add)
	if add.Count != 2 {
		t.Errorf("count %d, want 2", add.Count)
	}
	var list listNotesOut
	callJSON(t, cs, "list_notes", map[string]any{}, &list)
	if strings.Join(list.Notes, ",") != "one,two" {
		t.Errorf("notes %q", list.Notes)
	}
	if res := callJSON(t, cs, "add_note", map[string]any{"text": ""}, nil); !res.IsError {
		t.Error("an empty note was accepted")
	}
	var who whoamiOut
	callJSON(t, cs, "whoami", map[string]any{}, &who)
	if who.User != tokenKey("tok-alice") || who.Token != "" {
		t.Errorf("whoami %+v: want the hash and no token", who)
	}
	other := connect(t, "tok-bob", true)
	callJSON(t, other, "list_notes", map[string]any{}, &list)
	if len(list.Notes) != 0 {
		t.Errorf("another token sees %q", list.Notes)
	}
	callJSON(t, other, "whoami", map[string]any{}, &who)
	if who.Token != "tok-bob" {
		t.Errorf("whoami with reveal: %+v", who)
	}
	if tokenKey("") != "anonymous" {
		t.Error("no token must be anonymous")
	}
}

func TestEchoAndSlow(t *testing.T) {
	t.Parallel()
	cs := connect(t, "", false)
	if got := text(callJSON(t, cs, "echo", map[string]any{"text": "hi"}, nil)); got != "hi" {
		t.Errorf("echo: %q", got)
	}
	if got := text(callJSON(t, cs, "slow", map[string]any{"duration": "10ms"}, nil)); got != "slept 10ms" {
		t.Errorf("slow: %q", got)
	}
	if res := callJSON(t, cs, "slow", map[string]any{"duration": "soon"}, nil); !res.IsError {
		t.Error("a bad duration was accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"duration": "1m"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("slow with a deadline: %v after %v", err, time.Since(start))
	}
}

// TestProcess runs the server as a process: it reads MCP_ACCESS_TOKEN and
// exits cleanly when its stdin closes.
func TestProcess(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-reveal-token")
	cmd.Env = append(os.Environ(), "NOTES_TEST_SERVE=1", "MCP_ACCESS_TOKEN=tok-proc")
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var who whoamiOut
	callJSON(t, cs, "whoami", map[string]any{}, &who)
	if who.Token != "tok-proc" {
		t.Errorf("whoami in a process: %+v", who)
	}
	start := time.Now()
	// Close closes stdin first and reports the exit status; a server that
	// ignored EOF would be signalled after TerminateDuration.
	if err := cs.Close(); err != nil {
		t.Errorf("the server did not exit cleanly on stdin EOF: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("exit took %v; want it prompt on stdin EOF", d)
	}
}

// TestProcessKeyEnv: with -key-env NAME the server needs a key in $NAME
// beside its token: it refuses to start without one and whoami names it.
func TestProcessKeyEnv(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-reveal-token", "-key-env", "NOTES_KEY")
	cmd.Env = append(os.Environ(), "NOTES_TEST_SERVE=1", "MCP_ACCESS_TOKEN=tok-proc", "NOTES_KEY=key-proc")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
		&mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var who whoamiOut
	callJSON(t, cs, "whoami", map[string]any{}, &who)
	if who.Token != "tok-proc" || who.Key != "key-proc" {
		t.Errorf("whoami with a key: %+v", who)
	}
	_ = cs.Close()

	without := exec.Command(os.Args[0], "-key-env", "NOTES_KEY")
	without.Env = append(os.Environ(), "NOTES_TEST_SERVE=1", "NOTES_KEY=")
	out, err := without.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the key in $NOTES_KEY is not set") {
		t.Errorf("without its key: %v %s", err, out)
	}
}

// TestResourceUpdated: with -resource, a client subscribed to
// notes://notes hears of each add_note (what wakes a runner), and reads
// the notes there.
func TestResourceUpdated(t *testing.T) {
	withResource = true
	defer func() { withResource = false }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	updated := make(chan string, 4)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := newServer("tok", false).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
	}).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close(); _ = ss.Wait() }()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: notesURI}); err != nil {
		t.Fatal(err)
	}
	callJSON(t, cs, "add_note", map[string]any{"text": "one"}, nil)
	select {
	case uri := <-updated:
		if uri != notesURI {
			t.Errorf("updated %q", uri)
		}
	case <-ctx.Done():
		t.Fatal("no notifications/resources/updated after add_note")
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: notesURI})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != `["one"]` {
		t.Errorf("reading %s: %v %v", notesURI, err, res)
	}
}
