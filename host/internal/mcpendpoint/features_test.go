//lint:file-ignore SA1019 roots, sampling and logging are deprecated from MCP 2026-07-28 but still spoken by the 2025 revisions the endpoint serves: these tests drive them (issue 9).
package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// session connects a go-sdk client with opts (and roots) to the endpoint,
// pinned to version ("" lets go-sdk choose).
func (e *env) session(t testing.TB, token, version string, opts *mcp.ClientOptions, roots ...*mcp.Root) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts)
	c.AddRoots(roots...)
	cs, err := e.dial(t, c, token, version)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	return cs
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rpc posts one JSON-RPC message on a session (pinned to version) and
// returns the response's content type and its messages in order (each
// SSE event, or the JSON body).
func (e *env) rpc(t testing.TB, token, sid, version, body string) (string, []json.RawMessage) {
	t.Helper()
	resp := e.rawPost(t, token, sid, body, map[string]string{"Mcp-Protocol-Version": version})
	ct := resp.Header.Get("Content-Type")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d for %s: %s", resp.StatusCode, body, b)
	}
	if strings.HasPrefix(ct, "application/json") {
		return ct, []json.RawMessage{b}
	}
	var out []json.RawMessage
	for _, line := range strings.Split(string(b), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, json.RawMessage(data))
		}
	}
	return ct, out
}

// TestProgress: progress a tool reports reaches the client under the
// client's own progress token, on the call's own response, which then is
// an SSE stream; a call without a token is answered with plain JSON and
// its progress is dropped.
func TestProgress(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		for i := range 3 {
			if err := ext.Progress(ctx, req.Session, float64(i+1), 3, "step"); err != nil {
				return nil, err
			}
		}
		return ext.TextResult("done"), nil
	})
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	cs := e.session(t, aliceTok, "2025-11-25", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, r.Params)
			mu.Unlock()
		},
	})
	params := &mcp.CallToolParams{Name: "notes__add", Arguments: map[string]any{}}
	params.SetProgressToken("tok-7")
	if res, err := cs.CallTool(tctx(t), params); err != nil || text(res) != "done" {
		t.Fatalf("call: %v %v", err, res)
	}
	// go-sdk's client hands notifications to their handlers asynchronously.
	waitFor(t, "3 progress notifications", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 3
	})
	mu.Lock()
	slices.SortFunc(got, func(a, b *mcp.ProgressNotificationParams) int { return int(a.Progress - b.Progress) })
	if len(got) != 3 || got[0].ProgressToken != "tok-7" || got[2].Progress != 3 || got[2].Total != 3 || got[0].Message != "step" {
		t.Errorf("progress = %+v, want 3 notifications under tok-7", got)
	}
	mu.Unlock()
	if calls := e.host.Calls(); calls[len(calls)-1].ProgressToken != `"tok-7"` {
		t.Errorf("the host saw progress token %q", calls[len(calls)-1].ProgressToken)
	}

	ct, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-11-25", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"notes__add","arguments":{},"_meta":{"progressToken":5,"trace":"x"}}}`)
	if !strings.HasPrefix(ct, "text/event-stream") || len(msgs) != 4 || !strings.Contains(string(msgs[0]), `"progressToken":5`) ||
		!strings.Contains(string(msgs[3]), `"id":3,"result"`) {
		t.Errorf("with a token: %s %s", ct, msgs)
	}
	if calls := e.host.Calls(); calls[len(calls)-1].ProgressToken != "5" {
		t.Errorf("the host saw progress token %q", calls[len(calls)-1].ProgressToken)
	}
	ct, msgs = e.rpc(t, aliceTok, cs.ID(), "2025-11-25", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`)
	if !strings.HasPrefix(ct, "application/json") || len(msgs) != 1 || !strings.Contains(string(msgs[0]), "done") {
		t.Errorf("without a token: %s %s", ct, msgs)
	}
}

// TestCancel: a client's cancellation — its go-sdk context, or a
// notifications/cancelled of its own — cancels the host's call.
func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{}, 1)
	cancelled := make(chan time.Time, 1)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		started <- struct{}{}
		<-ctx.Done()
		cancelled <- time.Now()
		return nil, ctx.Err()
	})
	cs := e.session(t, aliceTok, "2025-11-25", nil)
	ctx, cancel := context.WithCancel(tctx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__add", Arguments: map[string]any{}})
		errc <- err
	}()
	<-started
	at := time.Now()
	cancel()
	select {
	case seen := <-cancelled:
		t.Logf("the host's call saw the client's cancellation %v after it", seen.Sub(at))
	case <-time.After(5 * time.Second):
		t.Fatal("the client's cancellation did not reach the host")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("the client's call: %v", err)
	}

	// notifications/cancelled alone, the POST still open.
	done := make(chan []json.RawMessage, 1)
	go func() {
		_, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-11-25", `{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"notes__add","arguments":{}}}`)
		done <- msgs
	}()
	<-started
	resp := e.rawPost(t, aliceTok, cs.ID(), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-1","reason":"user"}}`, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("notifications/cancelled: HTTP %d, want 202", resp.StatusCode)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("notifications/cancelled did not reach the host")
	}
	if msgs := <-done; len(msgs) != 1 || !strings.Contains(string(msgs[0]), "was cancelled") {
		t.Errorf("the cancelled call answered %s", msgs)
	}
}

// answeringClient declares sampling, elicitation and roots and answers
// each with something that names who.
func answeringClient(who string) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			if r.Params.MaxTokens == 13 {
				return nil, &jsonrpc.Error{Code: -32042, Message: "sampling refused by " + who}
			}
			return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: "sampled for " + who}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Name of " + who}}, nil
		},
	}
}

// askingTools makes the host's tools ask the client: ask/sample,
// ask/elicit, ask/roots (and ask/refused: a sampling the client refuses).
func askingTools(e *env) {
	e.host.SetTools("alice", tool("ask/sample", "", ""), tool("ask/elicit", "", ""), tool("ask/roots", "", ""), tool("ask/refused", "", ""))
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		method, params := ext.MethodCreateMessage, `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5}`
		switch req.Name {
		case "ask/elicit":
			method, params = ext.MethodElicit, `{"mode":"form","message":"Your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`
		case "ask/roots":
			method, params = ext.MethodListRoots, `{}`
		case "ask/refused":
			params = `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":13}`
		}
		out, err := req.Session.Request(ctx, method, json.RawMessage(params))
		var re *ext.RPCError
		switch {
		case errors.As(err, &re):
			return ext.ErrorResult("the client refused: %s (%d)", re.Message, re.Code), nil
		case errors.Is(err, ext.ErrUnimplemented):
			return ext.ErrorResult("unimplemented: %v", err), nil
		case err != nil:
			return nil, err
		}
		return ext.TextResult(string(out)), nil
	})
}

// TestRequestsToTheClient: a tool's sampling, elicitation and roots
// requests reach the calling client on the call's stream and its answers
// come back; a client without the capability is not asked
// (ext.ErrUnimplemented); a client's error answer arrives as an
// ext.RPCError.
func TestRequestsToTheClient(t *testing.T) {
	e := newEnv(t, nil)
	askingTools(e)
	cs := e.session(t, aliceTok, "2025-11-25", answeringClient("alice"), &mcp.Root{URI: "file:///home/alice", Name: "home"})
	for name, want := range map[string]string{
		"ask__sample":  "sampled for alice",
		"ask__elicit":  "Name of alice",
		"ask__roots":   "file:///home/alice",
		"ask__refused": "the client refused: sampling refused by alice (-32042)",
	} {
		res, err := cs.CallTool(tctx(t), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil || !strings.Contains(text(res), want) {
			t.Errorf("%s: %v %q, want %q", name, err, text(res), want)
		}
	}
	plain := e.session(t, aliceTok, "2025-11-25", &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	for _, name := range []string{"ask__sample", "ask__elicit", "ask__roots"} {
		res, err := plain.CallTool(tctx(t), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil || !res.IsError || !strings.Contains(text(res), "unimplemented") {
			t.Errorf("%s without the capability: %v %q", name, err, text(res))
		}
	}
}

// waitStream returns once the session's standalone stream carries
// notifications: the host's log messages (at level error) reach it.
func waitStream(t *testing.T, e *env, logs <-chan *mcp.LoggingMessageParams) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.host.Notify(context.Background(), "alice", ext.MethodLogMessage, json.RawMessage(`{"level":"error","logger":"probe","data":"probe"}`))
		select {
		case <-logs:
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's stream never carried a log message")
		}
	}
}

// TestOutsideRequests: what the host sends a user's sessions outside any
// request — log messages (filtered by each session's level), resource
// updates (to subscribed sessions only), and requests (roots) — reaches
// them on their standalone streams; another user's sessions see none of
// it, and a closed session leaves the host.
func TestOutsideRequests(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetCatalog("alice", hosttest.Catalog{Resources: []api.Resource{{Resource: ext.Resource{URI: "notes://alice/today"}}}})
	logs := make(chan *mcp.LoggingMessageParams, 64)
	updates := make(chan string, 8)
	opts := answeringClient("alice")
	opts.LoggingMessageHandler = func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- r.Params }
	opts.ResourceUpdatedHandler = func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updates <- r.Params.URI }
	cs := e.session(t, aliceTok, "2025-11-25", opts, &mcp.Root{URI: "file:///home/alice"})
	other := make(chan *mcp.LoggingMessageParams, 64)
	otherUpdates := make(chan string, 8)
	cs2 := e.session(t, aliceTok, "2025-11-25", &mcp.ClientOptions{
		LoggingMessageHandler:  func(_ context.Context, r *mcp.LoggingMessageRequest) { other <- r.Params },
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { otherUpdates <- r.Params.URI },
	})
	bobLogs := make(chan *mcp.LoggingMessageParams, 64)
	bob := e.session(t, bobTok, "2025-11-25", &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { bobLogs <- r.Params },
	})
	for _, c := range []*mcp.ClientSession{cs, bob} {
		if err := c.SetLoggingLevel(tctx(t), &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.host.Attached("alice"); n != 2 {
		t.Errorf("%d sessions of alice attached, want 2", n)
	}
	waitStream(t, e, logs)
	e.host.Notify(context.Background(), "alice", ext.MethodLogMessage, json.RawMessage(`{"level":"info","logger":"x","data":"quiet"}`))
	e.host.Notify(context.Background(), "alice", ext.MethodLogMessage, json.RawMessage(`{"level":"critical","logger":"x","data":"loud"}`))
	select {
	case l := <-logs:
		if l.Data != "loud" || l.Level != "critical" {
			t.Errorf("got log %+v, want only the critical one", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the critical log message did not arrive")
	}

	roots, err := e.host.RequestUser(tctx(t), "alice", ext.MethodListRoots, json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(roots), "file:///home/alice") {
		t.Errorf("roots asked outside a request: %s %v", roots, err)
	}
	// A newer session that declared roots but never opened its stream
	// declares nothing to the host, which then asks one that can hear it.
	resp := e.rawPost(t, aliceTok, "", strings.Replace(initBody, `"capabilities":{}`, `"capabilities":{"roots":{}}`, 1), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a raw initialize: HTTP %d", resp.StatusCode)
	}
	roots, err = e.host.RequestUser(tctx(t), "alice", ext.MethodListRoots, json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(roots), "file:///home/alice") {
		t.Errorf("roots asked beside a stream-less session: %s %v", roots, err)
	}

	if err := cs.Subscribe(tctx(t), &mcp.SubscribeParams{URI: "notes://alice/today"}); err != nil {
		t.Fatal(err)
	}
	if n := e.host.ResourceSubscribers("alice")["notes://alice/today"]; n != 1 {
		t.Errorf("%d subscribers, want 1", n)
	}
	e.host.Notify(context.Background(), "alice", ext.MethodResourceUpdated, json.RawMessage(`{"uri":"notes://alice/today"}`))
	e.host.Notify(context.Background(), "alice", ext.MethodResourceUpdated, json.RawMessage(`{"uri":"notes://alice/other"}`))
	select {
	case uri := <-updates:
		if uri != "notes://alice/today" {
			t.Errorf("update of %q", uri)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the resource update did not arrive")
	}
	var err2 *jsonrpc.Error
	if err := cs.Subscribe(tctx(t), &mcp.SubscribeParams{URI: "notes://bob/x"}); !errors.As(err, &err2) || err2.Code != -32002 {
		t.Errorf("subscribing to an unknown resource: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case u := <-updates:
		t.Errorf("a second update %q", u)
	case u := <-otherUpdates:
		t.Errorf("an unsubscribed session got %q", u)
	case l := <-other:
		t.Errorf("a session that set no level got log %+v", l)
	case l := <-bobLogs:
		t.Errorf("bob got alice's log %+v", l)
	default:
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the closed session to leave the host", func() bool {
		return e.host.Attached("alice") == 2 && len(e.host.ResourceSubscribers("alice")) == 0
	})
	_ = cs2
}

// TestRootsChanged: a client's roots/list_changed reaches the host.
func TestRootsChanged(t *testing.T) {
	e := newEnv(t, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	cs, err := c.Connect(tctx(t), &mcp.StreamableClientTransport{Endpoint: e.srv.URL,
		HTTPClient: &http.Client{Transport: &bearerRT{base: e.tr, token: aliceTok}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	c.AddRoots(&mcp.Root{URI: "file:///new"})
	waitFor(t, "roots/list_changed at the host", func() bool {
		return slices.ContainsFunc(e.host.SessionNotes(), func(n hosttest.SessionNote) bool {
			return n.User == "alice" && n.Method == ext.MethodRootsChanged
		})
	})
}

func catalogOf(user string) hosttest.Catalog {
	return hosttest.Catalog{
		Prompts: []api.Prompt{{Prompt: ext.Prompt{Name: user + "notes/summarize",
			Definition: json.RawMessage(`{"name":"summarize","description":"Sum up.","arguments":[{"name":"topic"}]}`)}, Extension: "mcp"}},
		Resources: []api.Resource{{Resource: ext.Resource{URI: "notes://" + user + "/today",
			Definition: json.RawMessage(`{"uri":"notes://` + user + `/today","name":"today","mimeType":"text/plain"}`)}, Extension: "mcp"}},
		Templates: []api.ResourceTemplate{{ResourceTemplate: ext.ResourceTemplate{URITemplate: "notes://" + user + "/day/{day}",
			Definition: json.RawMessage(`{"uriTemplate":"notes://` + user + `/day/{day}","name":"day"}`)}, Extension: "mcp"}},
	}
}

// TestPromptsAndResources: each user lists, gets and reads only their own
// prompts, resources and templates (prompt names mapped like tools), with
// completions, cacheScope "private" on every list, and list_changed when
// they change.
func TestPromptsAndResources(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetCatalog("alice", catalogOf("a"))
	e.host.SetCatalog("bob", catalogOf("b"))
	promptsChanged := make(chan struct{}, 4)
	resourcesChanged := make(chan struct{}, 4)
	for _, v := range []string{"2025-11-25", ""} {
		t.Run("version="+v, func(t *testing.T) {
			cs := e.session(t, aliceTok, v, &mcp.ClientOptions{
				PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { promptsChanged <- struct{}{} },
				ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { resourcesChanged <- struct{}{} },
			})
			ctx := tctx(t)
			pl, err := cs.ListPrompts(ctx, nil)
			if err != nil || len(pl.Prompts) != 1 || pl.Prompts[0].Name != "anotes__summarize" || pl.Prompts[0].Description != "Sum up." {
				t.Fatalf("prompts: %v %+v", err, pl)
			}
			gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "anotes__summarize", Arguments: map[string]string{"topic": "x"}})
			if err != nil || len(gp.Messages) != 1 || !strings.Contains(gp.Messages[0].Content.(*mcp.TextContent).Text, `alice anotes/summarize {"topic":"x"}`) {
				t.Errorf("prompts/get: %v %+v", err, gp)
			}
			if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "bnotes__summarize"}); err == nil {
				t.Error("alice got bob's prompt")
			}
			rl, err := cs.ListResources(ctx, nil)
			if err != nil || len(rl.Resources) != 1 || rl.Resources[0].URI != "notes://a/today" {
				t.Fatalf("resources: %v %+v", err, rl)
			}
			tl, err := cs.ListResourceTemplates(ctx, nil)
			if err != nil || len(tl.ResourceTemplates) != 1 || tl.ResourceTemplates[0].URITemplate != "notes://a/day/{day}" {
				t.Fatalf("templates: %v %+v", err, tl)
			}
			for uri, want := range map[string]string{"notes://a/today": "alice notes://a/today", "notes://a/day/monday": "alice notes://a/day/monday"} {
				rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
				if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != want {
					t.Errorf("read %s: %v %+v", uri, err, rr)
				}
			}
			if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://b/today"}); err == nil {
				t.Error("alice read bob's resource")
			}
			comp, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "anotes__summarize"},
				Argument: mcp.CompleteParamsArgument{Name: "topic", Value: "x"}})
			if err != nil || !slices.Equal(comp.Completion.Values, []string{"alice:anotes/summarize:x"}) {
				t.Errorf("completion: %v %+v", err, comp)
			}
		})
	}
	cs := e.session(t, aliceTok, "2025-11-25", &mcp.ClientOptions{
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { promptsChanged <- struct{}{} },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { resourcesChanged <- struct{}{} },
	})
	for _, m := range []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"} {
		_, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"`+m+`"}`)
		if len(msgs) != 1 || !strings.Contains(string(msgs[0]), `"cacheScope":"private"`) {
			t.Errorf("%s: %s, want cacheScope private", m, msgs)
		}
	}
	// A change reaches the session (a notification per kind). The stream
	// may open after the first change: change until one arrives.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		c := catalogOf("a")
		c.Prompts[0].Definition = json.RawMessage(fmt.Sprintf(`{"description":"v%d"}`, i))
		c.Resources = append(c.Resources, api.Resource{Resource: ext.Resource{URI: fmt.Sprintf("notes://a/n%d", i)}})
		e.host.SetCatalog("alice", c)
		select {
		case <-promptsChanged:
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no prompts/list_changed")
			}
			continue
		}
		break
	}
	select {
	case <-resourcesChanged:
	case <-time.After(5 * time.Second):
		t.Fatal("no resources/list_changed")
	}
}

// TestTasks: a task-augmented call carries its task params to the host
// and answers the host's CreateTaskResult; tasks/get, tasks/result,
// tasks/list and tasks/cancel reach the host; tasks are offered from
// 2025-11-25 only.
func TestTasks(t *testing.T) {
	e := newEnv(t, nil)
	research := tool("research/query", "", "")
	research.Execution = json.RawMessage(`{"taskSupport":"optional"}`)
	e.host.SetTools("alice", research)
	e.host.SetCallTool(func(_ context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		if len(req.Task) == 0 {
			return ext.TextResult("no task"), nil
		}
		return ext.RawResult(json.RawMessage(`{"task":{"taskId":"research/t1","status":"working","ttl":60000,"createdAt":"2026-01-01T00:00:00Z"}}`))
	})
	e.host.SetTask(func(_ context.Context, user, method string, params json.RawMessage, _ ext.Session) (json.RawMessage, error) {
		if !strings.Contains(string(params), "research/t1") && method != ext.MethodTaskList {
			return nil, ext.ErrNotFound
		}
		switch method {
		case ext.MethodTaskGet, ext.MethodTaskCancel:
			return json.RawMessage(`{"taskId":"research/t1","status":"completed","user":"` + user + `"}`), nil
		case ext.MethodTaskResult:
			return json.RawMessage(`{"content":[{"type":"text","text":"the report"}]}`), nil
		}
		return json.RawMessage(`{"tasks":[{"taskId":"research/t1","status":"completed"}]}`), nil
	})
	cs := e.session(t, aliceTok, "2025-11-25", nil)
	_, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if !strings.Contains(string(msgs[0]), `"execution":{"taskSupport":"optional"}`) {
		t.Errorf("tools/list: %s, want the execution property", msgs[0])
	}
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"research__query","arguments":{},"task":{"ttl":60000}}}`: `"taskId":"research/t1","status":"working"`,
		`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"research/t1"}}`:                                        `"status":"completed","user":"alice"`,
		`{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"research/t1"}}`:                                     `the report`,
		`{"jsonrpc":"2.0","id":5,"method":"tasks/list"}`:                                                                         `"tasks":[`,
		`{"jsonrpc":"2.0","id":6,"method":"tasks/cancel","params":{"taskId":"research/t1"}}`:                                     `"status":"completed"`,
		`{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"research/nope"}}`:                                      `unknown task`,
	} {
		_, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-11-25", body)
		if len(msgs) != 1 || !strings.Contains(string(msgs[0]), want) {
			t.Errorf("%s: %s, want %s", body, msgs, want)
		}
	}
	if calls := e.host.Calls(); calls[0].Task != `{"ttl":60000}` {
		t.Errorf("the host saw task params %q", calls[0].Task)
	}
	for v, want := range map[string]bool{"2025-11-25": true, "2025-06-18": false} {
		init := strings.Replace(initBody, "2025-11-25", v, 1)
		b, _ := io.ReadAll(e.rawPost(t, aliceTok, "", init, nil).Body)
		if got := strings.Contains(string(b), `"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`); got != want {
			t.Errorf("%s offers tasks: %v, want %v: %s", v, got, want, b)
		}
	}
	old := e.session(t, aliceTok, "2025-06-18", nil)
	_, msgs = e.rpc(t, aliceTok, old.ID(), "2025-06-18", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"research/t1"}}`)
	if !strings.Contains(string(msgs[0]), "-32601") {
		t.Errorf("tasks/get on 2025-06-18: %s, want method not found", msgs[0])
	}
}

// TestInstructions: the extensions' instructions are merged at
// initialize, one paragraph per source prefixed with its name, in the
// host's order, each cut at 4 KiB and all within 16 KiB; every session
// gets the same text.
func TestInstructions(t *testing.T) {
	e := newEnv(t, nil)
	var ins []api.Instruction
	for _, src := range []string{"alpha", "beta", "gamma", "delta", "epsilon"} {
		ins = append(ins, api.Instruction{Instruction: ext.Instruction{Source: src, Text: src + " says: " + strings.Repeat("x", 5000)}, Extension: "mcp"})
	}
	ins = append(ins, api.Instruction{Instruction: ext.Instruction{Source: "notes", Text: "Use add_note for notes."}, Extension: "hello"})
	e.host.SetCatalog("alice", hosttest.Catalog{Instructions: ins})
	a, b := e.session(t, aliceTok, "2025-11-25", nil), e.session(t, aliceTok, "2025-06-18", nil)
	got := a.InitializeResult().Instructions
	if got != b.InitializeResult().Instructions {
		t.Error("two sessions got different instructions")
	}
	paras := strings.Split(got, "\n\n")
	if len(got) > 16<<10+200 || !strings.HasPrefix(paras[0], "[notes] Use add_note") || !strings.HasPrefix(paras[1], "[alpha] alpha says: xxx") ||
		len(paras[1]) > 4<<10+10 || !strings.HasSuffix(paras[1], "…") || !strings.Contains(paras[len(paras)-1], "2 more sources were left out") {
		t.Errorf("instructions (%d bytes): %.300q ... %q", len(got), got, paras[len(paras)-1])
	}
	if bobs := e.session(t, bobTok, "2025-11-25", nil).InitializeResult().Instructions; bobs != "" {
		t.Errorf("bob got instructions %.100q", bobs)
	}
}

// TestBatch: a 2025-03-26 session takes JSON-RPC batches (that revision
// requires it) and answers them with an array; notifications alone get
// 202; later revisions refuse batches.
func TestBatch(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.session(t, aliceTok, "2025-03-26", nil)
	resp := e.rawPost(t, aliceTok, cs.ID(), `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},`+
		`{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"notes__add","arguments":{"n":1}}}]`, map[string]string{"Mcp-Protocol-Version": "2025-03-26"})
	var out []struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || len(out) != 2 {
		t.Fatalf("batch answer %s: %v", b, err)
	}
	ids := []string{string(out[0].ID), string(out[1].ID)}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{`"b"`, "1"}) || !strings.Contains(string(b), "alice notes/add") {
		t.Errorf("batch answer %s", b)
	}
	resp = e.rawPost(t, aliceTok, cs.ID(), `[{"jsonrpc":"2.0","method":"notifications/initialized"}]`, map[string]string{"Mcp-Protocol-Version": "2025-03-26"})
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a batch of notifications: HTTP %d, want 202", resp.StatusCode)
	}
	newer := e.session(t, aliceTok, "2025-06-18", nil)
	resp = e.rawPost(t, aliceTok, newer.ID(), `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, map[string]string{"Mcp-Protocol-Version": "2025-06-18"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a batch on 2025-06-18: HTTP %d, want 400", resp.StatusCode)
	}
}

// TestStatelessBoundToUser: requests of the stateless revision are served
// from the verified user's tables only, with progress on the request's
// stream, and the revision's requests to the client refused.
func TestStatelessBoundToUser(t *testing.T) {
	e := newEnv(t, nil)
	askingTools(e)
	e.host.SetTools("alice", tool("ask/sample", "", ""), tool("slow/steps", "", ""))
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		if req.Name == "slow/steps" {
			_ = ext.Progress(ctx, req.Session, 1, 2, "")
			_ = ext.Progress(ctx, req.Session, 2, 2, "")
			return ext.TextResult("stepped for " + req.User), nil
		}
		_, err := req.Session.Request(ctx, ext.MethodCreateMessage, json.RawMessage(`{}`))
		return ext.ErrorResult("%v", err), nil
	})
	progress := make(chan float64, 8)
	alice := e.session(t, aliceTok, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params.Progress },
	})
	bob := e.session(t, bobTok, "", nil)
	if v := alice.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	params := &mcp.CallToolParams{Name: "slow__steps", Arguments: map[string]any{}}
	params.SetProgressToken("p")
	res, err := alice.CallTool(tctx(t), params)
	if err != nil || text(res) != "stepped for alice" {
		t.Fatalf("alice's call: %v %v", err, res)
	}
	for range 2 {
		select {
		case <-progress:
		case <-time.After(5 * time.Second):
			t.Fatal("progress did not arrive")
		}
	}
	if res, err := alice.CallTool(tctx(t), &mcp.CallToolParams{Name: "ask__sample", Arguments: map[string]any{}}); err != nil || !strings.Contains(text(res), "unimplemented") {
		t.Errorf("sampling in a stateless request: %v %q", err, text(res))
	}
	if _, err := bob.CallTool(tctx(t), &mcp.CallToolParams{Name: "slow__steps", Arguments: map[string]any{}}); err == nil {
		t.Error("bob called alice's tool")
	}
	for _, c := range e.host.Calls() {
		if c.User != "alice" {
			t.Errorf("the host ran %+v", c)
		}
	}
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("Sessions() = %d, want 0", n)
	}
	if mcpendpoint.ToolCalls(e.ep) < 2 {
		t.Errorf("%d of alice's tools/call answered, want 2", mcpendpoint.ToolCalls(e.ep))
	}
}

// TestStatelessRevoked: CloseToken cancels the token's stateless requests
// in flight, answered by the fast path or by go-sdk's handler.
func TestStatelessRevoked(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			e := newEnv(t, nil)
			mcpendpoint.SetStatelessFast(e.ep, fast)
			started := e.blockCalls()
			c := e.session(t, aliceTok, "", nil)
			errc := make(chan error, 1)
			go func() {
				res, err := c.CallTool(tctx(t), &mcp.CallToolParams{Name: "notes__add", Arguments: map[string]any{}})
				if err == nil && !res.IsError {
					err = errors.New("the call succeeded")
				}
				errc <- err
			}()
			<-started
			e.ver.revoke(aliceTok)
			e.ep.CloseToken("a1")
			select {
			case err := <-errc:
				t.Logf("the revoked token's stateless call ended: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the revoked token's stateless call goes on")
			}
			if n := mcpendpoint.StatelessFastCalls(e.ep); (n == 1) != fast {
				t.Errorf("the fast path answered %d calls", n)
			}
		})
	}
}

// TestURLElicitationRequired: a call whose extension fails it with the
// URL elicitation required error (-32042, MCP 2025-11-25) is answered
// with that JSON-RPC error, its message and data as the extension gave
// them, on a session and on the stateless revision (the fast path's
// answer is compared with go-sdk's in TestStatelessFastSameAnswers);
// another JSON-RPC error of a call, or a -32042 without data, is still an
// isError result that does not pass the extension's words on.
func TestURLElicitationRequired(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice", tool("gh/issues", "List issues.", ""), tool("gh/other", "", ""), tool("gh/nodata", "", ""))
	data := `{"elicitations":[{"mode":"url","elicitationId":"e-alice","url":"https://host.example/signin/gh?u=alice","message":"Sign in to gh"}]}`
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		switch req.Name {
		case "gh/issues":
			return nil, fmt.Errorf("extension %q: %w", "mcp", &ext.RPCError{Code: ext.CodeURLElicitationRequired, Message: "gh needs you to sign in", Data: json.RawMessage(data)})
		case "gh/nodata":
			return nil, &ext.RPCError{Code: ext.CodeURLElicitationRequired, Message: "secret words, no data"}
		}
		return nil, &ext.RPCError{Code: -1, Message: "secret words of another error", Data: json.RawMessage(`{}`)}
	})
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("version "+version, func(t *testing.T) {
			c, err := e.connect(t, aliceTok, version)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.tryCall("gh__issues", `{}`)
			var re *jsonrpc.Error
			if !errors.As(err, &re) || re.Code != mcp.CodeURLElicitationRequired || re.Message != "gh needs you to sign in" {
				t.Fatalf("call = %v; want the -32042 error", err)
			}
			var got struct {
				Elicitations []*mcp.ElicitParams `json:"elicitations"`
			}
			if err := json.Unmarshal(re.Data, &got); err != nil || len(got.Elicitations) != 1 ||
				got.Elicitations[0].Mode != "url" || got.Elicitations[0].URL != "https://host.example/signin/gh?u=alice" ||
				got.Elicitations[0].ElicitationID != "e-alice" {
				t.Errorf("data = %s (%v)", re.Data, err)
			}
			for _, name := range []string{"gh__other", "gh__nodata"} {
				res, err := c.tryCall(name, `{}`)
				if err != nil || !res.IsError || strings.Contains(text(res), "secret words") {
					t.Errorf("%s = %+v, %v; want an isError result without the extension's words", name, res, err)
				}
			}
		})
	}
}

// TestElicitationComplete: notifications/elicitation/complete that an
// extension sends a user reaches that user's sessions that declared URL
// elicitation, on their standalone streams, and no other session (one
// that declared form elicitation only hears the log message sent after
// it, on the same ordered stream, and nothing before).
func TestElicitationComplete(t *testing.T) {
	e := newEnv(t, nil)
	done := make(chan string, 64)
	elicit := func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	e.session(t, aliceTok, "2025-11-25", &mcp.ClientOptions{
		Capabilities:               &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler:         elicit,
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) { done <- r.Params.ElicitationID },
	})
	formDone := make(chan string, 64)
	logs := make(chan *mcp.LoggingMessageParams, 64)
	form := e.session(t, aliceTok, "2025-11-25", &mcp.ClientOptions{
		ElicitationHandler: elicit,
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			formDone <- r.Params.ElicitationID
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- r.Params },
	})
	if err := form.SetLoggingLevel(tctx(t), &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	waitStream(t, e, logs)
	waitFor(t, "the URL elicitation session to hear the completion", func() bool {
		e.host.Notify(context.Background(), "alice", ext.MethodElicitationComplete, json.RawMessage(`{"elicitationId":"e1"}`))
		select {
		case id := <-done:
			if id != "e1" {
				t.Errorf("completion of %q", id)
			}
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	for len(logs) > 0 {
		<-logs
	}
	e.host.Notify(context.Background(), "alice", ext.MethodLogMessage, json.RawMessage(`{"level":"error","logger":"x","data":"after"}`))
	for heard := false; !heard; {
		select {
		case l := <-logs:
			heard = l.Data == "after"
		case <-time.After(5 * time.Second):
			t.Fatal("the log message sent after the completion did not arrive")
		}
	}
	select {
	case id := <-formDone:
		t.Errorf("a session without URL elicitation heard the completion of %q", id)
	default:
	}
}
