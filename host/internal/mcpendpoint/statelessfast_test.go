package mcpendpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// The _meta triple an unpinned go-sdk v1.8 client sends with every
// request.
const sdkMeta = `"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},` +
	`"io.modelcontextprotocol/clientInfo":{"name":"test","version":""},` +
	`"io.modelcontextprotocol/protocolVersion":"2026-07-28"`

// statelessCall is a tools/call of the stateless revision as a go-sdk
// client writes it.
func statelessCall(id, name, args string) string {
	return statelessBody(id, sdkMeta, name, args)
}

func statelessBody(id, meta, name, args string) string {
	b := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"_meta":{` + meta + `},"name":"` + name + `"`
	if args != "" {
		b += `,"arguments":` + args
	}
	return b + `}}`
}

// statelessHeaders are a go-sdk client's headers for a call of name.
func statelessHeaders(name string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
}

// answer is what a client sees of one HTTP answer.
type answer struct {
	status  int
	headers map[string]string
	message any    // the JSON-RPC message (the body, or the SSE event's data), decoded
	text    string // a body that is not JSON
}

// readAnswer reads resp as a client sees it.
func readAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	a := answer{status: resp.StatusCode, headers: map[string]string{}}
	for k, v := range resp.Header {
		switch {
		case k == "Date" || k == "Content-Length":
		default:
			a.headers[k] = strings.Join(v, ", ")
		}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	raw := body
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var events [][]byte
		for _, line := range strings.Split(string(body), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				events = append(events, []byte(data))
			}
		}
		switch len(events) {
		case 0: // the request ended without an answer
			a.text = string(body)
			return a
		case 1:
		default:
			t.Fatalf("%d events in %q, want 1", len(events), clipText(string(body)))
		}
		raw = events[0]
		a.text = strings.Replace(string(body), string(raw), "DATA", 1) // the framing
	}
	if err := json.Unmarshal(raw, &a.message); err != nil {
		a.message, a.text = nil, string(body)
	}
	return a
}

func clipText(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// TestStatelessFastSameAnswers sends the same requests through the
// stateless revision's fast path and through go-sdk's handler (the fast
// path switched off), and compares what the client gets (status, headers,
// the JSON-RPC message) and what the host was asked; the cases the fast
// path must answer are checked to be answered by it, the others to reach
// go-sdk.
func TestStatelessFastSameAnswers(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{MaxBodyBytes: 1 << 20})
	hdrSchema := json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)
	e.host.SetTools("alice",
		tool("notes/add", "Add a note.", ""), tool("notes/list", "List notes.", ""),
		tool("code/run", "Run code.", ext.ExposureCodemode), tool("more/hidden", "A deferred tool.", ext.ExposureDeferred),
		tool("bad/err", "", ""), tool("bad/raw", "", ""), tool("bad/content", "", ""), tool("bad/fail", "", ""),
		tool("bad/signin", "", ""), api.Tool{Tool: ext.Tool{Name: "geo/where", InputSchema: hdrSchema}, Extension: "mcp"})
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		switch req.Name {
		case "bad/err":
			return ext.ErrorResult("it broke for %s", req.User), nil
		case "bad/raw":
			return ext.RawResult(json.RawMessage(`{"content":[{"type":"text","text":"raw <&> \u00e9"}],"structuredContent":{"n":1.50},"_meta":{"x":1},"extra":true}`))
		case "bad/content":
			return &ext.CallToolResult{Content: json.RawMessage(`{"type":"text"}`)}, nil
		case "bad/fail":
			return nil, fmt.Errorf("secret host detail: %w", ext.ErrUnavailable)
		case "bad/signin":
			return nil, fmt.Errorf("extension %q: %w", "mcp", &ext.RPCError{Code: ext.CodeURLElicitationRequired, Message: "sign in, " + req.User,
				Data: json.RawMessage(`{"elicitations":[{"mode":"url","elicitationId":"e1","url":"https://example.com/signin?u=<&>","message":"Open it"}]}`)})
		}
		return hosttest.Echo(req.User, req.Name, req.Arguments), nil
	})
	huge := `{"text":"` + strings.Repeat("x", 900<<10) + `","n":[1,2,3]}`
	deep := strings.Repeat("[", 1001) + strings.Repeat("]", 1001)
	with := func(name string, kv ...string) map[string]string {
		h := statelessHeaders(name)
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	cases := []struct {
		name    string
		body    string
		headers map[string]string
		fast    bool
	}{
		{"success", statelessCall("7", "notes__add", `{"v":1}`), statelessHeaders("notes__add"), true},
		{"string id", statelessCall(`"req-<1>"`, "notes__add", `{"v":"é"}`), statelessHeaders("notes__add"), true},
		{"isError", statelessCall("8", "bad__err", `{}`), statelessHeaders("bad__err"), true},
		{"raw result", statelessCall("9", "bad__raw", `{}`), statelessHeaders("bad__raw"), true},
		{"malformed content", statelessCall("10", "bad__content", `{}`), statelessHeaders("bad__content"), true},
		{"host call fails", statelessCall("11", "bad__fail", `{}`), statelessHeaders("bad__fail"), true},
		{"URL elicitation required", statelessCall("20", "bad__signin", `{}`), statelessHeaders("bad__signin"), true},
		{"codemode tool", statelessCall("12", "code__run", `{}`), statelessHeaders("code__run"), true},
		{"deferred tool", statelessCall("13", "more__hidden", `{"q":1}`), statelessHeaders("more__hidden"), true},
		{"no arguments", statelessCall("14", "notes__add", ""), statelessHeaders("notes__add"), true},
		{"null arguments", statelessCall("15", "notes__add", "null"), statelessHeaders("notes__add"), true},
		{"arguments with spaces", statelessCall("16", "notes__add", "{ \"a\" :\n [ 1 , 2 ] }"), statelessHeaders("notes__add"), true},
		{"huge arguments", statelessCall("17", "notes__add", huge), statelessHeaders("notes__add"), true},
		{"no clientInfo", statelessBody("18", `"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, "notes__add", `{}`), statelessHeaders("notes__add"), true},
		{"charset", statelessCall("19", "notes__add", `{}`), with("notes__add", "Content-Type", "application/json; charset=utf-8"), true},

		{"unknown tool", statelessCall("30", "nope", `{}`), statelessHeaders("nope"), false},
		{"search_tools", statelessCall("31", "search_tools", `{"query":"deferred"}`), statelessHeaders("search_tools"), false},
		{"x-mcp-header tool", statelessCall("32", "geo__where", `{"region":"eu"}`), with("geo__where", "Mcp-Param-Region", "eu"), false},
		{"x-mcp-header missing", statelessCall("33", "geo__where", `{"region":"eu"}`), statelessHeaders("geo__where"), false},
		{"no _meta", `{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`, statelessHeaders("notes__add"), false},
		{"no clientCapabilities", statelessBody("35", `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"null clientCapabilities", statelessBody("36", `"io.modelcontextprotocol/clientCapabilities":null,"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"bad clientCapabilities", statelessBody("37", `"io.modelcontextprotocol/clientCapabilities":{"roots":5},"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"bad clientInfo", statelessBody("38", `"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":"me","io.modelcontextprotocol/protocolVersion":"2026-07-28"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"older version in _meta", strings.Replace(statelessCall("39", "notes__add", `{}`), `"2026-07-28"`, `"2025-11-25"`, 1), statelessHeaders("notes__add"), false},
		{"unsupported version", strings.Replace(statelessCall("40", "notes__add", `{}`), `"2026-07-28"`, `"2099-01-01"`, 1), with("notes__add", "Mcp-Protocol-Version", "2099-01-01"), false},
		{"header and _meta differ", statelessCall("41", "notes__add", `{}`), with("notes__add", "Mcp-Protocol-Version", "2099-01-01"), false},
		{"Mcp-Name differs", statelessCall("42", "notes__add", `{}`), statelessHeaders("notes__list"), false},
		{"no Mcp-Method", statelessCall("43", "notes__add", `{}`), with("notes__add", "Mcp-Method", ""), false},
		{"progress token", statelessBody("44", sdkMeta+`,"progressToken":"p1"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"log level", statelessBody("45", sdkMeta+`,"io.modelcontextprotocol/logLevel":"debug"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"other _meta", statelessBody("46", sdkMeta+`,"x-trace":"t"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"task params", strings.Replace(statelessCall("47", "notes__add", `{}`), `"arguments"`, `"task":{"ttl":1},"arguments"`, 1), statelessHeaders("notes__add"), false},
		{"name key in another case", strings.Replace(statelessCall("48", "notes__add", `{}`), `"name":"notes__add"`, `"Name":"notes__add"`, 1), statelessHeaders("notes__add"), false},
		{"duplicate name", strings.Replace(statelessCall("49", "notes__add", `{}`), `"name":"notes__add"`, `"name":"notes__list","name":"notes__add"`, 1), statelessHeaders("notes__add"), false},
		{"duplicate _meta key", statelessBody("63", sdkMeta+`,"io.modelcontextprotocol/protocolVersion":"2025-11-25"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"escaped key", strings.Replace(statelessCall("64", "notes__add", `{}`), `"arguments"`, `"argument\u0073"`, 1), statelessHeaders("notes__add"), false},
		{"escaped name", strings.Replace(statelessCall("65", "notes__add", `{}`), `"name":"notes__add"`, `"name":"notes\u005f_add"`, 1), statelessHeaders("notes__add"), true},
		{"clientInfo key in another case", strings.Replace(statelessCall("62", "notes__add", `{}`), `{"name":"test"`, `{"Name":"test"`, 1), statelessHeaders("notes__add"), true},
		{"exponent in arguments", statelessCall("50", "notes__add", `{"n":1e400}`), statelessHeaders("notes__add"), false},
		{"small exponent in arguments", statelessCall("51", "notes__add", `{"n":1.5E3}`), statelessHeaders("notes__add"), false},
		{"too deep", statelessCall("52", "notes__add", `{"d":`+deep+`}`), statelessHeaders("notes__add"), false},
		{"fractional id", statelessCall("1.5", "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"negative zero id", statelessCall("-0", "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"big id", statelessCall("12345678901234567890", "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"id with an escape", statelessCall(`"\ud800-\u0041"`, "notes__add", `{}`), statelessHeaders("notes__add"), false},
		{"notification", strings.Replace(statelessCall("0", "notes__add", `{}`), `"id":0,`, "", 1), statelessHeaders("notes__add"), false},
		{"batch", "[" + statelessCall("53", "notes__add", `{}`) + "]", statelessHeaders("notes__add"), false},
		{"extra top-level field", strings.Replace(statelessCall("54", "notes__add", `{}`), `"jsonrpc"`, `"x":1,"jsonrpc"`, 1), statelessHeaders("notes__add"), false},
		{"jsonrpc 1.0", strings.Replace(statelessCall("55", "notes__add", `{}`), `"2.0"`, `"1.0"`, 1), statelessHeaders("notes__add"), false},
		{"trailing data", statelessCall("56", "notes__add", `{}`) + " {}", statelessHeaders("notes__add"), false},
		{"invalid UTF-8", statelessCall("57", "notes__add", "{\"t\":\"\xff\"}"), statelessHeaders("notes__add"), false},
		{"Last-Event-ID", statelessCall("58", "notes__add", `{}`), with("notes__add", "Last-Event-ID", "x"), false},
		{"Host in capitals", statelessCall("59", "notes__add", `{}`), with("notes__add", "Host", "LOCALHOST"), false},
		{"Accept without SSE", statelessCall("60", "notes__add", `{}`), with("notes__add", "Accept", "application/json"), false},
		{"text content type", statelessCall("61", "notes__add", `{}`), with("notes__add", "Content-Type", "text/plain"), false},
		{"chunked body", statelessCall("66", "notes__add", `{}`), with("notes__add", "Transfer-Encoding", "chunked"), true},
		{"chunked body over the cap", statelessCall("67", "notes__add", `{"t":"`+strings.Repeat("x", 1<<20)+`"}`), with("notes__add", "Transfer-Encoding", "chunked"), false},
	}
	send := func(t *testing.T, body string, headers map[string]string, fast bool) (answer, []hosttest.Call, bool) {
		t.Helper()
		mcpendpoint.SetStatelessFast(e.ep, fast)
		calls, served := len(e.host.Calls()), mcpendpoint.StatelessFastCalls(e.ep)
		a := readAnswer(t, e.rawPost(t, aliceTok, "", body, headers))
		return a, e.host.Calls()[calls:], mcpendpoint.StatelessFastCalls(e.ep) > served
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, gotCalls, byFast := send(t, c.body, c.headers, true)
			want, wantCalls, _ := send(t, c.body, c.headers, false)
			if byFast != c.fast {
				t.Errorf("answered by the fast path: %v, want %v", byFast, c.fast)
			}
			if strings.HasSuffix(c.name, "over the cap") && got.status != http.StatusRequestEntityTooLarge {
				t.Errorf("a body over the cap: %d, want 413", got.status)
			}
			if got.status != want.status || !reflect.DeepEqual(got.headers, want.headers) {
				t.Errorf("fast path: %d %v\ngo-sdk:    %d %v", got.status, got.headers, want.status, want.headers)
			}
			if !reflect.DeepEqual(got.message, want.message) || got.text != want.text {
				g, _ := json.Marshal(got.message)
				w, _ := json.Marshal(want.message)
				t.Errorf("fast path: %s %q\ngo-sdk:    %s %q", clipText(string(g)), clipText(got.text), clipText(string(w)), clipText(want.text))
			}
			if !slices.Equal(gotCalls, wantCalls) {
				t.Errorf("the host was asked %+v by the fast path, %+v through go-sdk", gotCalls, wantCalls)
			}
			if c.name == "URL elicitation required" {
				msg, _ := got.message.(map[string]any)
				if e, _ := msg["error"].(map[string]any); e["code"] != float64(ext.CodeURLElicitationRequired) || e["message"] != "sign in, alice" || e["data"] == nil {
					t.Errorf("message %v: want the extension's -32042 error with its data", msg)
				}
			} else if c.fast {
				res, _ := got.message.(map[string]any)["result"].(map[string]any)
				if res["resultType"] != "complete" || res["_meta"] == nil {
					t.Errorf("result %v: want resultType complete and the server's identity in _meta", res)
				}
			}
			if strings.Contains(fmt.Sprint(got.message), "secret host detail") {
				t.Error("the host's error message reached the client")
			}
		})
	}
}

// TestStatelessFastClient: an unpinned go-sdk client (2026-07-28) lists
// and calls tools, the calls answered by the fast path: a result, an
// isError result, a codemode tool's refusal and a failed host call, each
// as go-sdk's own handler answers it, and an unknown tool refused.
func TestStatelessFastClient(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/list", "List notes.", ""),
		tool("code/run", "", ext.ExposureCodemode), tool("bad/err", "", ""), tool("bad/fail", "", ""))
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		switch req.Name {
		case "bad/err":
			return ext.ErrorResult("it broke"), nil
		case "bad/fail":
			return nil, errors.New("the extension crashed")
		}
		return hosttest.Echo(req.User, req.Name, req.Arguments), nil
	})
	c, err := e.connect(t, aliceTok, "")
	if err != nil {
		t.Fatal(err)
	}
	if v := c.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	if got := c.names(t); !slices.Equal(got, []string{"bad__err", "bad__fail", "notes__add", "notes__list"}) {
		t.Errorf("lists %v", got)
	}
	calls := []struct{ name, text string }{
		{"notes__add", `alice notes/add {"v":1}`},
		{"bad__err", "it broke"},
		{"code__run", `tool "code__run" is only callable from code`},
		{"bad__fail", `tool "bad__fail" failed with an internal error`},
	}
	results := map[bool][]*mcp.CallToolResult{}
	for _, fast := range []bool{true, false} {
		mcpendpoint.SetStatelessFast(e.ep, fast)
		before := mcpendpoint.StatelessFastCalls(e.ep)
		for _, call := range calls {
			res := c.call(t, call.name, `{"v":1}`)
			if text(res) != call.text || res.IsError != (call.name != "notes__add") || res.NeedsInput() {
				t.Errorf("fast %v: %s answered %q (isError %v)", fast, call.name, text(res), res.IsError)
			}
			results[fast] = append(results[fast], res)
		}
		if n := mcpendpoint.StatelessFastCalls(e.ep) - before; fast && n != int64(len(calls)) || !fast && n != 0 {
			t.Errorf("fast %v: the fast path answered %d calls", fast, n)
		}
		if _, err := c.tryCall("nope", `{}`); err == nil || !strings.Contains(err.Error(), `unknown tool "nope"`) {
			t.Errorf("fast %v: an unknown tool: %v", fast, err)
		}
	}
	for i := range calls {
		a, _ := json.Marshal(results[true][i])
		b, _ := json.Marshal(results[false][i])
		if string(a) != string(b) {
			t.Errorf("%s: the fast path's result %s, go-sdk's %s", calls[i].name, a, b)
		}
	}
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("Sessions() = %d, want 0", n)
	}
}

// TestStatelessFastLogged: at level debug the log names each call the
// fast path took (what the end-to-end test looks for), and no other.
func TestStatelessFastLogged(t *testing.T) {
	logs := &hosttest.LogBuffer{}
	e := newEnv(t, &mcpendpoint.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c, err := e.connect(t, aliceTok, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, fast := range []bool{true, false} {
		mcpendpoint.SetStatelessFast(e.ep, fast)
		c.call(t, "notes__add", fmt.Sprintf(`{"fast":%v}`, fast))
	}
	const line = `msg="mcp: a stateless tools/call took the fast path" user=alice tool=notes/add`
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Errorf("%d log lines %q, want 1; the log:\n%s", n, line, logs.String())
	}
}

// TestStatelessFastPerUser: the fast path serves each request from its
// verified user's tables with the capabilities of its own _meta, however
// two users' requests alternate (each user's state remembers its own
// last _meta), as go-sdk's handler does; another user's tool is unknown
// there.
func TestStatelessFastPerUser(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		return ext.TextResult(req.User + " " + string(req.Session.Capabilities())), nil
	})
	metas := map[string]string{
		aliceTok: `"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"`,
		bobTok:   `"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"`,
	}
	tools := map[string]string{aliceTok: "notes__add", bobTok: "web__fetch"}
	want := map[string]string{aliceTok: "alice", bobTok: "bob"}
	send := func(tok, name string, fast bool) (answer, bool) {
		mcpendpoint.SetStatelessFast(e.ep, fast)
		before := mcpendpoint.StatelessFastCalls(e.ep)
		a := readAnswer(t, e.rawPost(t, tok, "", statelessBody("1", metas[tok], name, `{}`), statelessHeaders(name)))
		return a, mcpendpoint.StatelessFastCalls(e.ep) > before
	}
	for range 3 {
		for _, tok := range []string{aliceTok, bobTok} {
			got, byFast := send(tok, tools[tok], true)
			sdk, _ := send(tok, tools[tok], false)
			if !byFast {
				t.Errorf("%s's call did not take the fast path", want[tok])
			}
			if !reflect.DeepEqual(got.message, sdk.message) {
				t.Errorf("%s: fast path %v, go-sdk %v", want[tok], got.message, sdk.message)
			}
			if txt := fmt.Sprint(got.message); !strings.Contains(txt, want[tok]+" {") || strings.Contains(txt, "sampling") != (tok == aliceTok) {
				t.Errorf("%s's call answered %s", want[tok], txt)
			}
		}
	}
	got, byFast := send(bobTok, "notes__add", true)
	if byFast || !strings.Contains(fmt.Sprint(got.message), `unknown tool "notes__add"`) {
		t.Errorf("bob calling alice's tool: fast path %v, answered %v", byFast, got.message)
	}
	for _, c := range e.host.Calls() {
		if (c.User == "bob") != (c.Name == "web/fetch") {
			t.Errorf("the host ran %+v", c)
		}
	}
}

// TestStatelessFastDisconnect: a client that drops a call answered by the
// fast path cancels the host's call.
func TestStatelessFastDisconnect(t *testing.T) {
	e := newEnv(t, nil)
	started, ended := make(chan struct{}, 1), make(chan error, 1)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		started <- struct{}{}
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL, strings.NewReader(statelessCall("1", "notes__add", `{}`)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range statelessHeaders("notes__add") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	errc := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: e.tr}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the host's call ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dropped call goes on at the host")
	}
	<-errc
	if n := mcpendpoint.StatelessFastCalls(e.ep); n != 1 {
		t.Errorf("the fast path answered %d calls, want 1", n)
	}
}

// TestStatelessFastCancelled: a call cancelled while the host runs it (its
// token revoked, the endpoint closing) ends at once, answered with the
// error result of a cancelled call in go-sdk's framing. go-sdk's handler
// races there: it stops waiting for the answer when the request is
// cancelled, and sends it only when the cancelled call's result came
// first; both of its answers are taken.
func TestStatelessFastCancelled(t *testing.T) {
	for _, how := range []string{"CloseToken", "Close"} {
		t.Run(how, func(t *testing.T) {
			answers := map[bool]answer{}
			for _, fast := range []bool{true, false} {
				e := newEnv(t, nil)
				mcpendpoint.SetStatelessFast(e.ep, fast)
				started := e.blockCalls()
				got := make(chan answer, 1)
				go func() {
					got <- readAnswer(t, e.rawPost(t, aliceTok, "", statelessCall("1", "notes__add", `{}`), statelessHeaders("notes__add")))
				}()
				<-started
				if how == "CloseToken" {
					e.ver.revoke(aliceTok)
					e.ep.CloseToken("a1")
				} else {
					_ = e.ep.Close()
				}
				select {
				case answers[fast] = <-got:
				case <-time.After(5 * time.Second):
					t.Fatalf("fast %v: the cancelled call goes on", fast)
				}
				if n := mcpendpoint.StatelessFastCalls(e.ep); (n == 1) != fast {
					t.Errorf("fast %v: the fast path took %d calls", fast, n)
				}
			}
			got, want := answers[true], answers[false]
			res, _ := got.message.(map[string]any)["result"].(map[string]any)
			if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), `tool "notes__add" was cancelled`) || res["resultType"] != "complete" {
				t.Errorf("the fast path answered %v, want the error result of a cancelled call", got.message)
			}
			if want.message == nil {
				want.message, want.text = got.message, got.text // go-sdk stopped waiting first
			}
			if got.status != want.status || !reflect.DeepEqual(got.headers, want.headers) || !reflect.DeepEqual(got.message, want.message) || got.text != want.text {
				t.Errorf("fast path: %d %v %v %q\ngo-sdk:    %d %v %v %q", got.status, got.headers, got.message, got.text, want.status, want.headers, want.message, want.text)
			}
		})
	}
}

// statelessRequest is a go-sdk client's POST of body, a call of name, for
// ServeHTTP.
func statelessRequest(body []byte, name string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	for k, v := range statelessHeaders(name) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	return req
}

// deadlineRecorder is a ResponseRecorder that records the write deadlines
// set on it (through http.ResponseController).
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

// TestStatelessFastNoWriteDeadline: the fast path writes its answer as
// go-sdk's handler does, with no deadline, so that a big result reaches a
// client that reads it slowly (a 4 MiB result at 300 KB/s takes 14 s);
// only the sessions' streams, whose writes a stalled client would hold
// up for others, bound a write.
func TestStatelessFastNoWriteDeadline(t *testing.T) {
	e := newEnv(t, nil)
	for _, fast := range []bool{true, false} {
		mcpendpoint.SetStatelessFast(e.ep, fast)
		before := mcpendpoint.StatelessFastCalls(e.ep)
		w := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
		e.ep.ServeHTTP(w, statelessRequest([]byte(statelessCall("1", "notes__add", `{"v":1}`)), "notes__add"))
		a := readAnswer(t, w.Result())
		if res, _ := a.message.(map[string]any)["result"].(map[string]any); a.status != http.StatusOK || res == nil || res["isError"] != nil {
			t.Fatalf("fast %v: %d %v %q", fast, a.status, a.message, a.text)
		}
		if took := mcpendpoint.StatelessFastCalls(e.ep) > before; took != fast {
			t.Errorf("fast %v: taken by the fast path: %v", fast, took)
		}
		if len(w.deadlines) > 0 {
			t.Errorf("fast %v: the answer was written with write deadlines %v", fast, w.deadlines)
		}
	}
}

// FuzzStatelessFast: any body sent as a go-sdk client's tools/call gets
// the same answer from the fast path as from go-sdk's handler, and the
// host is asked the same.
func FuzzStatelessFast(f *testing.F) {
	e := newEnv(f, nil)
	for _, s := range []string{
		statelessCall("1", "notes__add", `{"v":1}`),
		statelessCall(`"a"`, "notes__add", ""),
		statelessBody("2", `"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, "notes__add", `[1,"x",{"y":null}]`),
		statelessBody("3", sdkMeta+`,"progressToken":7`, "notes__add", `{}`),
		strings.Replace(statelessCall("4", "notes__add", `{}`), `"name":"notes__add"`, `"name":"notes__list"`, 1),
	} {
		f.Add([]byte(s))
	}
	serve := func(body []byte, fast bool) (*httptest.ResponseRecorder, []hosttest.Call) {
		mcpendpoint.SetStatelessFast(e.ep, fast)
		before := len(e.host.Calls())
		w := httptest.NewRecorder()
		e.ep.ServeHTTP(w, statelessRequest(body, "notes__add"))
		return w, e.host.Calls()[before:]
	}
	// The harness reaches the fast path, or every comparison is moot.
	before := mcpendpoint.StatelessFastCalls(e.ep)
	if w, _ := serve([]byte(statelessCall("0", "notes__add", `{}`)), true); w.Code != http.StatusOK || mcpendpoint.StatelessFastCalls(e.ep) == before {
		f.Fatalf("a plain call did not take the fast path: %d %s", w.Code, w.Body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotCalls := serve(body, true)
		want, wantCalls := serve(body, false)
		ga, wa := readAnswer(t, got.Result()), readAnswer(t, want.Result())
		if ga.status != wa.status || !reflect.DeepEqual(ga.headers, wa.headers) || !reflect.DeepEqual(ga.message, wa.message) || ga.text != wa.text {
			t.Fatalf("%q:\nfast path: %d %v %v %q\ngo-sdk:    %d %v %v %q", body, ga.status, ga.headers, ga.message, ga.text, wa.status, wa.headers, wa.message, wa.text)
		}
		if !slices.Equal(gotCalls, wantCalls) {
			t.Fatalf("%q: the host was asked %+v by the fast path, %+v through go-sdk", body, gotCalls, wantCalls)
		}
	})
}
