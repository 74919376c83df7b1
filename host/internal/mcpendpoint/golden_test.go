package mcpendpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/golden from what the endpoint answers")

// goldenStep is one HTTP exchange of a transcript.
type goldenStep struct {
	name   string
	method string // POST (default) or DELETE
	body   string
	// cancel: body is a tools/call the host holds until it is cancelled;
	// cancelBody is then posted, and the transcript shows the cancel's
	// answer before the call's.
	cancelBody string
	// stream: a GET opens the session's standalone stream; the user's
	// tools change (notifications/tools/list_changed on it), then the
	// session ends (DELETE), which ends the stream; the transcript shows
	// the DELETE's answer, then the stream's.
	stream bool
}

// goldenHost is a host whose tools show each kind of answer: notes/add
// echoes, notes/fail answers isError, notes/progress reports progress
// twice before its result, notes/wait waits to be cancelled.
func goldenHost(e *env) chan struct{} {
	e.host.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/fail", "Fails.", ""),
		tool("notes/progress", "Reports progress.", ""), tool("notes/wait", "Waits.", ""))
	e.host.SetCatalog("alice", hosttest.Catalog{
		Prompts:   []api.Prompt{{Prompt: ext.Prompt{Name: "notes/summary", Definition: json.RawMessage(`{"name":"summary","description":"Summarise notes.","arguments":[{"name":"topic"}]}`)}, Extension: "mcp"}},
		Resources: []api.Resource{{Resource: ext.Resource{URI: "notes://all", Definition: json.RawMessage(`{"uri":"notes://all","name":"all","mimeType":"text/plain"}`)}, Extension: "mcp"}},
	})
	started := make(chan struct{}, 1)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		switch req.Name {
		case "notes/fail":
			return ext.ErrorResult("no notes to %s", "fail"), nil
		case "notes/progress":
			for i := 1; i <= 2; i++ {
				if err := ext.Progress(ctx, req.Session, float64(i), 2, fmt.Sprintf("step %d", i)); err != nil {
					return nil, err
				}
			}
			return ext.TextResult("done"), nil
		case "notes/wait":
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return hosttest.Echo(req.User, req.Name, req.Arguments), nil
	})
	return started
}

// statefulScript is a session of revision v: initialize, the lists, calls
// (ok, isError, progress), prompts, resources, errors, a cancellation and
// the session's end (and a batch, which 2025-03-26 alone takes).
func statefulScript(v string) []goldenStep {
	steps := []goldenStep{
		{name: "initialize", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + v + `","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"golden","version":"1"}}}`},
		{name: "initialized", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{name: "tools-list", body: `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`},
		{name: "call-ok", body: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"notes__add","arguments":{"text":"milk"}}}`},
		{name: "call-iserror", body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"notes__fail","arguments":{}}}`},
		{name: "call-progress", body: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"notes__progress","arguments":{},"_meta":{"progressToken":"p-5"}}}`},
		{name: "prompts-list", body: `{"jsonrpc":"2.0","id":6,"method":"prompts/list"}`},
		{name: "prompts-get", body: `{"jsonrpc":"2.0","id":7,"method":"prompts/get","params":{"name":"notes__summary","arguments":{"topic":"milk"}}}`},
		{name: "resources-list", body: `{"jsonrpc":"2.0","id":8,"method":"resources/list"}`},
		{name: "resources-read", body: `{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"notes://all"}}`},
		{name: "error-method", body: `{"jsonrpc":"2.0","id":10,"method":"nosuch/method","params":{}}`},
		{name: "error-tool", body: `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"nosuch__tool","arguments":{}}}`},
		{name: "cancel", body: `{"jsonrpc":"2.0","id":"c-12","method":"tools/call","params":{"name":"notes__wait","arguments":{}}}`,
			cancelBody: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-12","reason":"user"}}`},
	}
	if v == "2025-03-26" {
		steps = append(steps, goldenStep{name: "batch", body: `[{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"notes__add","arguments":{}}},{"jsonrpc":"2.0","id":14,"method":"ping"}]`})
	} else {
		steps = append(steps, goldenStep{name: "batch-refused", body: `[{"jsonrpc":"2.0","id":13,"method":"ping"}]`})
	}
	return append(steps, goldenStep{name: "stream-and-end", method: http.MethodGet, stream: true})
}

// The _meta a stateless (2026-07-28) request carries.
const goldenMeta = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"golden","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`

// statelessScript is the same conversation in the stateless revision:
// server/discover instead of initialize, every request carrying its
// revision, no session (cancellation is the connection's end, and a
// notification gets no answer of its own).
func statelessScript() []goldenStep {
	return []goldenStep{
		{name: "discover", body: `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + goldenMeta + `}}`},
		{name: "tools-list", body: `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + goldenMeta + `}}`},
		{name: "call-ok", body: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{` + goldenMeta + `,"name":"notes__add","arguments":{"text":"milk"}}}`},
		{name: "call-iserror", body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{` + goldenMeta + `,"name":"notes__fail","arguments":{}}}`},
		{name: "call-progress", body: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{"progressToken":"p-5","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"golden","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"notes__progress","arguments":{}}}`},
		{name: "prompts-list", body: `{"jsonrpc":"2.0","id":6,"method":"prompts/list","params":{` + goldenMeta + `}}`},
		{name: "prompts-get", body: `{"jsonrpc":"2.0","id":7,"method":"prompts/get","params":{` + goldenMeta + `,"name":"notes__summary","arguments":{"topic":"milk"}}}`},
		{name: "resources-list", body: `{"jsonrpc":"2.0","id":8,"method":"resources/list","params":{` + goldenMeta + `}}`},
		{name: "resources-read", body: `{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{` + goldenMeta + `,"uri":"notes://all"}}`},
		{name: "error-method", body: `{"jsonrpc":"2.0","id":10,"method":"nosuch/method","params":{` + goldenMeta + `}}`},
		{name: "error-tool", body: `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{` + goldenMeta + `,"name":"nosuch__tool","arguments":{}}}`},
		{name: "cancel-notification", body: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12,"reason":"user"}}`},
	}
}

// TestGoldenTranscripts: what the endpoint answers, byte for byte, to one
// conversation per protocol revision, against testdata/golden/<rev>.txtar
// (go test -run TestGoldenTranscripts ./internal/mcpendpoint/ -update
// rewrites them). Session ids
// are shown as <session>; Date and Content-Length are left out; a batch's
// answers are shown sorted.
func TestGoldenTranscripts(t *testing.T) {
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t, nil)
			started := goldenHost(e)
			steps := statelessScript()
			if v != "2026-07-28" {
				steps = statefulScript(v)
			}
			var ar txtar.Archive
			ar.Comment = []byte("The endpoint's answers to one conversation of revision " + v + ".\n" +
				"Rewrite with: go test -run TestGoldenTranscripts ./internal/mcpendpoint/ -update\n")
			sid := ""
			for i, s := range steps {
				prefix := fmt.Sprintf("%02d-%s", i+1, s.name)
				hdr := goldenHeaders(v, sid, s.body)
				if s.stream {
					greq, gresp := goldenDo(t, e, http.MethodGet, "", hdr)
					e.host.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/new", "New.", ""))
					// The first event, read before the session ends.
					br := bufio.NewReader(gresp.Body)
					var first strings.Builder
					for !strings.HasSuffix(first.String(), "\n\n") {
						line, err := br.ReadString('\n')
						first.WriteString(line)
						if err != nil {
							t.Fatalf("reading the stream: %v (read %q)", err, first.String())
						}
					}
					dreq, dresp := goldenDo(t, e, http.MethodDelete, "", hdr)
					gresp.Body = io.NopCloser(io.MultiReader(strings.NewReader(first.String()), br))
					ar.Files = append(ar.Files, txtar.File{Name: prefix + " GET request", Data: greq},
						txtar.File{Name: prefix + " DELETE request", Data: dreq},
						txtar.File{Name: prefix + " DELETE answer", Data: goldenAnswer(t, dresp, sid)},
						txtar.File{Name: prefix + " GET answer", Data: goldenAnswer(t, gresp, sid)})
					continue
				}
				if s.cancelBody == "" {
					req, resp := goldenDo(t, e, s.method, s.body, hdr)
					if s.name == "initialize" {
						sid = resp.Header.Get("Mcp-Session-Id")
					}
					ar.Files = append(ar.Files, txtar.File{Name: prefix + " request", Data: req},
						txtar.File{Name: prefix + " answer", Data: goldenAnswer(t, resp, sid)})
					continue
				}
				type result struct {
					req  []byte
					resp *http.Response
				}
				done := make(chan result, 1)
				go func() {
					req, resp := goldenDo(t, e, s.method, s.body, hdr)
					done <- result{req, resp}
				}()
				<-started
				creq, cresp := goldenDo(t, e, http.MethodPost, s.cancelBody, goldenHeaders(v, sid, s.cancelBody))
				r := <-done
				ar.Files = append(ar.Files, txtar.File{Name: prefix + " request", Data: r.req},
					txtar.File{Name: prefix + " cancel request", Data: creq},
					txtar.File{Name: prefix + " cancel answer", Data: goldenAnswer(t, cresp, sid)},
					txtar.File{Name: prefix + " answer", Data: goldenAnswer(t, r.resp, sid)})
			}
			got := txtar.Format(&ar)
			path := filepath.Join("testdata", "golden", v+".txtar")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			compareTranscripts(t, path, want, got)
		})
	}
}

// compareTranscripts reports each part of got that differs from want.
func compareTranscripts(t *testing.T, path string, want, got []byte) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	w, g := txtar.Parse(want), txtar.Parse(got)
	parts := map[string][]byte{}
	for _, f := range w.Files {
		parts[f.Name] = f.Data
	}
	for _, f := range g.Files {
		old, ok := parts[f.Name]
		switch {
		case !ok:
			t.Errorf("%s: a new part %q:\n%s", path, f.Name, f.Data)
		case !bytes.Equal(old, f.Data):
			t.Errorf("%s: %q changed:\n--- want\n%s\n--- got\n%s", path, f.Name, old, f.Data)
		}
		delete(parts, f.Name)
	}
	for name := range parts {
		t.Errorf("%s: part %q is gone", path, name)
	}
	if !t.Failed() {
		t.Errorf("%s differs from what the endpoint answers (the comment or the order of parts); -update rewrites it", path)
	}
}

// goldenHeaders are a client's headers for body, of revision v in
// session sid: 2026-07-28 repeats the method and the name of a request in
// Mcp-Method and Mcp-Name.
func goldenHeaders(v, sid, body string) map[string]string {
	h := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	var m struct {
		Method string
		Params struct{ Name, URI string }
	}
	if v >= "2026-07-28" && json.Unmarshal([]byte(body), &m) == nil && m.Method != "" {
		h["Mcp-Method"] = m.Method
		if n := m.Params.Name + m.Params.URI; n != "" {
			h["Mcp-Name"] = n
		}
	}
	if sid != "" {
		h["Mcp-Session-Id"] = sid
	}
	if v != "2025-03-26" && (sid != "" || v == "2026-07-28") {
		h["Mcp-Protocol-Version"] = v
	}
	return h
}

// goldenDo sends one request as alice and returns it as the transcript
// shows it, with the response.
func goldenDo(t *testing.T, e *env, method, body string, hdr map[string]string) ([]byte, *http.Response) {
	t.Helper()
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, e.srv.URL, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	switch method {
	case http.MethodGet:
		req.Header.Del("Content-Type")
		req.Header.Set("Accept", "text/event-stream")
	case http.MethodDelete:
		req.Header.Del("Content-Type")
		req.Header.Del("Accept")
	}
	resp, err := (&http.Client{Transport: e.tr}).Do(req)
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(method + "\n")
	writeHeaders(&b, req.Header, "")
	b.WriteString("\n" + body)
	return []byte(strings.TrimRight(b.String(), "\n") + "\n"), resp
}

// goldenAnswer is resp as the transcript shows it: status, headers, body.
func goldenAnswer(t *testing.T, resp *http.Response, sid string) []byte {
	t.Helper()
	if resp == nil {
		return []byte("no answer\n")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("reading the answer: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", resp.StatusCode)
	writeHeaders(&b, resp.Header, sid)
	b.WriteString("\n")
	text := string(body)
	// A batch's answers come in the order its requests finish: shown
	// sorted.
	var batch []json.RawMessage
	if strings.HasPrefix(text, "[") && json.Unmarshal(body, &batch) == nil {
		parts := make([]string, len(batch))
		for i, m := range batch {
			parts[i] = string(m)
		}
		slices.Sort(parts)
		text = "[" + strings.Join(parts, ",") + "]" + text[len(strings.TrimRight(text, "\n")):]
	}
	if sid != "" {
		text = strings.ReplaceAll(text, sid, "<session>")
	}
	b.WriteString(text)
	return []byte(strings.TrimRight(b.String(), "\n") + "\n")
}

// writeHeaders writes h sorted, leaving out Date and Content-Length and
// showing the session id as <session>.
func writeHeaders(b *strings.Builder, h http.Header, sid string) {
	keys := make([]string, 0, len(h))
	for k := range h {
		if k != "Date" && k != "Content-Length" && k != "Authorization" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := strings.Join(h[k], ", ")
		if k == "Mcp-Session-Id" {
			v = "<session>"
		}
		if sid != "" {
			v = strings.ReplaceAll(v, sid, "<session>")
		}
		fmt.Fprintf(b, "%s: %s\n", k, v)
	}
}
