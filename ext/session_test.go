package ext_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// sessionTool reports progress twice, logs once, asks the client for a
// sampling answer and for its roots, and returns what it learned.
func sessionTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	s := ext.SessionOf(req.Session)
	if err := ext.Progress(ctx, s, 1, 2, "half"); err != nil {
		return nil, err
	}
	if err := s.Notify(ctx, ext.MethodLogMessage, json.RawMessage(`{"level":"info","data":"hello"}`)); err != nil {
		return nil, err
	}
	sample, err := s.Request(ctx, ext.MethodCreateMessage, json.RawMessage(`{"messages":[],"maxTokens":5}`))
	var rpcErr *ext.RPCError
	switch {
	case errors.As(err, &rpcErr):
		return ext.ErrorResult("client refused: %d %s %s", rpcErr.Code, rpcErr.Message, rpcErr.Data), nil
	case errors.Is(err, ext.ErrUnimplemented):
		return ext.ErrorResult("no sampling: %v", err), nil
	case err != nil:
		return nil, err
	}
	roots, err := s.Request(ctx, ext.MethodListRoots, nil)
	if err != nil {
		return ext.ErrorResult("no roots: %v", err), nil
	}
	if err := ext.Progress(ctx, s, 2, 2, ""); err != nil {
		return nil, err
	}
	return ext.TextResult(fmt.Sprintf("token=%s meta=%s task=%s sample=%s roots=%s", req.ProgressToken, req.Meta, req.Task, sample, roots)), nil
}

func (e *testExt) GetPrompt(_ context.Context, req *ext.GetPromptRequest) (json.RawMessage, error) {
	if req.Name != "test/greet" {
		return nil, ext.Errorf(ext.ErrNotFound, "prompt %q", req.Name)
	}
	var args map[string]string
	_ = json.Unmarshal(req.Arguments, &args)
	return json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user",
		"content": map[string]string{"type": "text", "text": "hello " + args["who"] + " from " + req.User}}}})
}

func (e *testExt) ReadResource(ctx context.Context, req *ext.ReadResourceRequest) (json.RawMessage, error) {
	if !strings.HasPrefix(req.URI, "test://") {
		return nil, ext.Errorf(ext.ErrNotFound, "resource %q", req.URI)
	}
	// Reading asks the client for its roots, to show the session works
	// here too.
	roots, err := ext.SessionOf(req.Session).Request(ctx, ext.MethodListRoots, nil)
	if err != nil {
		roots = json.RawMessage(`null`)
	}
	return json.Marshal(map[string]any{"contents": []any{map[string]any{"uri": req.URI, "text": "for " + req.User, "_meta": map[string]json.RawMessage{"roots": roots}}}})
}

func (e *testExt) SubscribeResource(_ context.Context, req *ext.SubscribeRequest) error {
	e.mu.Lock()
	h := e.host
	e.mu.Unlock()
	if req.Unsubscribe {
		return nil
	}
	uri, _ := json.Marshal(map[string]string{"uri": req.URI})
	go func() { _ = h.Notify(context.Background(), req.User, ext.MethodResourceUpdated, uri) }()
	return nil
}

func (e *testExt) Complete(_ context.Context, req *ext.CompleteRequest) (json.RawMessage, error) {
	var p struct {
		Ref      struct{ Name string }  `json:"ref"`
		Argument struct{ Value string } `json:"argument"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return nil, ext.Errorf(ext.ErrInvalidArgument, "completion params")
	}
	if p.Ref.Name != "test/greet" {
		return nil, ext.Errorf(ext.ErrNotFound, "prompt %q", p.Ref.Name)
	}
	return json.RawMessage(`{"completion":{"values":["` + p.Argument.Value + `-1"],"total":1}}`), nil
}

func (e *testExt) HandleTask(_ context.Context, req *ext.TaskRequest) (json.RawMessage, error) {
	if req.Method == ext.MethodTaskList {
		return json.RawMessage(`{"tasks":[]}`), nil
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(req.Params, &p)
	if p.TaskID != "t1" {
		return nil, ext.Errorf(ext.ErrNotFound, "task %q", p.TaskID)
	}
	return json.RawMessage(`{"taskId":"t1","status":"completed","method":"` + req.Method + `"}`), nil
}

func (e *testExt) SessionNotify(_ context.Context, user, method string, _ json.RawMessage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.heard = append(e.heard, user+" "+method)
	return nil
}

// TestSessions runs a call whose tool talks back to its client on every
// carrier: progress and log notifications arrive, the sampling and roots
// requests are answered by the test's session, the extension sees the
// progress token, _meta and task params.
func TestSessions(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, _, _ := configured(t, carrier, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sess := &exttest.Session{
				Caps: json.RawMessage(`{"sampling":{},"roots":{"listChanged":true}}`),
				Answer: func(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
					switch method {
					case ext.MethodCreateMessage:
						return json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"sampled"}}`), nil
					case ext.MethodListRoots:
						return json.RawMessage(`{"roots":[{"uri":"file:///work"}]}`), nil
					}
					return nil, ext.ErrUnimplemented
				},
			}
			res, err := e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{
				User: "alice", Name: "test/session", Arguments: json.RawMessage(`{}`),
				ProgressToken: json.RawMessage(`"tok-1"`), Meta: json.RawMessage(`{"x":1}`), Task: json.RawMessage(`{"ttl":5}`),
				Session: sess,
			})
			if err != nil {
				t.Fatal(err)
			}
			want := `token="tok-1" meta={"x":1} task={"ttl":5} sample={"role":"assistant","content":{"type":"text","text":"sampled"}} roots={"roots":[{"uri":"file:///work"}]}`
			if got := res.Text(); got != want {
				t.Errorf("result text = %q\nwant %q", got, want)
			}
			notes := sess.Notes()
			var methods []string
			for _, n := range notes {
				methods = append(methods, n.Method)
			}
			if strings.Join(methods, ",") != "notifications/progress,notifications/message,notifications/progress" {
				t.Errorf("notifications = %v", methods)
			}
			if len(notes) > 0 && string(notes[0].Params) != `{"progress":1,"total":2,"message":"half"}` {
				t.Errorf("first progress = %s", notes[0].Params)
			}
			if got := sess.Asked(); strings.Join(got, ",") != "sampling/createMessage,roots/list" {
				t.Errorf("requests = %v", got)
			}

			// A client that declared no sampling: the extension is told so.
			res, err = e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/session", Session: &exttest.Session{}})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Text(); !strings.HasPrefix(got, "no sampling:") || !strings.Contains(got, "sampling") {
				t.Errorf("without the capability: %q", got)
			}
			// No session at all: the same, never a panic.
			res, err = e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/session"})
			if err != nil || !strings.HasPrefix(res.Text(), "no sampling:") {
				t.Errorf("without a session: %v, %v", res, err)
			}
			// The client's JSON-RPC error reaches the extension whole.
			refusing := &exttest.Session{Caps: json.RawMessage(`{"sampling":{}}`),
				Answer: func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
					return nil, &ext.RPCError{Code: -1, Message: "user declined", Data: json.RawMessage(`{"why":"no"}`)}
				}}
			res, err = e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/session", Session: refusing})
			if err != nil || res.Text() != `client refused: -1 user declined {"why":"no"}` {
				t.Errorf("refused sampling: %q, %v", res.Text(), err)
			}
		})
	}
}

// TestCallParamsCross: a client's raw tools/call params reach the
// extension as they came on every carrier; out of process they travel
// alone and the extension's carrier reads the arguments, progress token,
// _meta and task from them.
func TestCallParamsCross(t *testing.T) {
	params := `{"name":"test_params","arguments":{"a":1},"_meta":{"x":1,"progressToken":"t"},"task":{"ttl":5}}`
	want := `params=` + params + ` args={"a":1} token="t" meta={"x":1,"progressToken":"t"} task={"ttl":5}`
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, _, _ := configured(t, carrier, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := &ext.CallToolRequest{
				User: "alice", Name: "test/params", Params: json.RawMessage(params), Arguments: json.RawMessage(`{"a":1}`),
				ProgressToken: json.RawMessage(`"t"`), Meta: json.RawMessage(`{"x":1,"progressToken":"t"}`), Task: json.RawMessage(`{"ttl":5}`),
			}
			if carrier != "inprocess" {
				// Before Describe the client takes the extension for one
				// built before call_params: the fields go, meta as the
				// rest of _meta, as that extension reads it.
				res, err := e.(ext.ToolCaller).CallTool(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if got, old := res.Text(), `params= args={"a":1} token="t" meta={"x":1} task={"ttl":5}`; got != old {
					t.Errorf("an older extension saw %s\nwant %s", got, old)
				}
			}
			// As the host does: Describe tells the client that the
			// extension's carrier reads the params.
			if _, err := e.Describe(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := e.(ext.ToolCaller).CallTool(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Text(); got != want {
				t.Errorf("the extension saw %s\nwant %s", got, want)
			}
			if carrier == "inprocess" {
				return
			}
			// The fields are the params' own: the carrier sent the params alone.
			res, err = e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/params", Params: json.RawMessage(params)})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Text(); got != want {
				t.Errorf("from the params alone the extension saw %s\nwant %s", got, want)
			}
		})
	}
}

// TestCapabilitiesBesideTools exercises prompts, resources, subscriptions,
// completions, tasks and session notifications on every carrier.
func TestCapabilitiesBesideTools(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, impl, h := configured(t, carrier, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := e.(ext.PromptProvider).GetPrompt(ctx, &ext.GetPromptRequest{User: "alice", Name: "test/greet", Arguments: json.RawMessage(`{"who":"bob"}`)})
			if err != nil || !strings.Contains(string(b), "hello bob from alice") {
				t.Errorf("GetPrompt = %s, %v", b, err)
			}
			if _, err := e.(ext.PromptProvider).GetPrompt(ctx, &ext.GetPromptRequest{User: "alice", Name: "test/none"}); !errors.Is(err, ext.ErrNotFound) || !strings.Contains(err.Error(), `prompt "test/none"`) {
				t.Errorf("unknown prompt: %v", err)
			}
			sess := &exttest.Session{Caps: json.RawMessage(`{"roots":{}}`), Answer: func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"roots":[]}`), nil
			}}
			b, err = e.(ext.ResourceProvider).ReadResource(ctx, &ext.ReadResourceRequest{User: "alice", URI: "test://a", Session: sess})
			if err != nil || string(b) != `{"contents":[{"_meta":{"roots":{"roots":[]}},"text":"for alice","uri":"test://a"}]}` {
				t.Errorf("ReadResource = %s, %v", b, err)
			}
			if err := e.(ext.ResourceProvider).SubscribeResource(ctx, &ext.SubscribeRequest{User: "alice", URI: "test://a"}); err != nil {
				t.Fatal(err)
			}
			n, err := h.WaitNotification(ctx, "alice", ext.MethodResourceUpdated)
			if err != nil || string(n.Params) != `{"uri":"test://a"}` {
				t.Errorf("resource updated: %+v, %v", n, err)
			}
			b, err = e.(ext.Completer).Complete(ctx, &ext.CompleteRequest{User: "alice", Params: json.RawMessage(`{"ref":{"type":"ref/prompt","name":"test/greet"},"argument":{"name":"who","value":"b"}}`)})
			if err != nil || string(b) != `{"completion":{"values":["b-1"],"total":1}}` {
				t.Errorf("Complete = %s, %v", b, err)
			}
			for _, m := range []string{ext.MethodTaskGet, ext.MethodTaskResult, ext.MethodTaskCancel} {
				b, err = e.(ext.TaskHandler).HandleTask(ctx, &ext.TaskRequest{User: "alice", Method: m, Params: json.RawMessage(`{"taskId":"t1"}`)})
				if err != nil || !strings.Contains(string(b), `"method":"`+m+`"`) {
					t.Errorf("%s = %s, %v", m, b, err)
				}
			}
			if err := e.(ext.SessionListener).SessionNotify(ctx, "alice", ext.MethodRootsChanged, nil); err != nil {
				t.Fatal(err)
			}
			impl.mu.Lock()
			heard := strings.Join(impl.heard, ";")
			impl.mu.Unlock()
			if heard != "alice notifications/roots/list_changed" {
				t.Errorf("heard %q", heard)
			}
		})
	}
}

// TestHostCatalogAndRequests publishes a whole catalog, sends a log
// notification and asks a user's session outside a call, through each
// carrier's host services.
func TestHostCatalogAndRequests(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			_, impl, h := configured(t, carrier, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			host := ext.Host(h)
			if carrier != "inprocess" {
				host = hostOf(impl)
			}
			c := &ext.Catalog{
				Tools:             []ext.Tool{{Name: "test/t"}},
				Prompts:           []ext.Prompt{{Name: "test/greet", Definition: json.RawMessage(`{"name":"greet","arguments":[{"name":"who"}]}`)}},
				Resources:         []ext.Resource{{URI: "test://a", Definition: json.RawMessage(`{"uri":"test://a","name":"a"}`)}},
				ResourceTemplates: []ext.ResourceTemplate{{URITemplate: "test://{x}", Definition: json.RawMessage(`{"uriTemplate":"test://{x}","name":"x"}`)}},
				Instructions:      []ext.Instruction{{Source: "s1", Text: "use it well"}},
			}
			if err := host.SetUserCatalog(ctx, "alice", c); err != nil {
				t.Fatal(err)
			}
			got := h.UserCatalog("alice")
			if len(got.Tools) != 1 || len(got.Prompts) != 1 || string(got.Prompts[0].Definition) != string(c.Prompts[0].Definition) ||
				len(got.Resources) != 1 || got.ResourceTemplates[0].URITemplate != "test://{x}" || got.Instructions[0].Text != "use it well" {
				t.Errorf("catalog = %+v", got)
			}
			// SetUserTools replaces the tools and keeps the rest.
			if err := host.SetUserTools(ctx, "alice", nil); err != nil {
				t.Fatal(err)
			}
			if got := h.UserCatalog("alice"); len(got.Tools) != 0 {
				t.Errorf("tools after SetUserTools(nil) = %+v", got.Tools)
			}
			if err := host.Notify(ctx, "alice", ext.MethodLogMessage, json.RawMessage(`{"level":"info","data":"x"}`)); err != nil {
				t.Fatal(err)
			}
			if n := h.Notifications("alice"); len(n) != 1 || n[0].Method != ext.MethodLogMessage {
				t.Errorf("notifications = %+v", n)
			}
			if _, err := host.RequestUser(ctx, "alice", ext.MethodListRoots, nil); !errors.Is(err, ext.ErrUnavailable) {
				t.Errorf("RequestUser without a session: %v; want ErrUnavailable", err)
			}
		})
	}
}

// TestCallChannelConcurrency runs many calls at once, some cancelled, on
// every carrier: every call gets its own result, cancelled ones end
// promptly, nothing is mixed up.
func TestCallChannelConcurrency(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, _, _ := configured(t, carrier, false)
			tc := e.(ext.ToolCaller)
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					if i%10 == 0 {
						cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
						defer cancel()
						if _, err := tc.CallTool(cctx, &ext.CallToolRequest{User: "u", Name: "test/block"}); !errors.Is(err, context.DeadlineExceeded) {
							errs <- fmt.Errorf("blocked call %d: %v", i, err)
						}
						return
					}
					args := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
					res, err := tc.CallTool(ctx, &ext.CallToolRequest{User: "u", Name: "test/echo", Arguments: args})
					if err != nil {
						errs <- err
						return
					}
					f, err := res.Fields()
					if err != nil || string(f.StructuredContent) != string(args) {
						errs <- fmt.Errorf("call %d got %s", i, f.StructuredContent)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
