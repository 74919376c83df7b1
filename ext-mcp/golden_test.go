package extmcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/agenthost/agenthost/ext"
)

var update = flag.Bool("update", false, "rewrite the received and read parts of the golden transcripts in testdata/golden")

// The environment of the scripted server (mode "scripted").
const (
	scriptEnv = "GOLDEN_SCRIPT" // the transcript whose "answer", "error", "notify" and "hold" parts it plays
	recordEnv = "GOLDEN_RECORD" // the file it appends every line it receives to
)

// serveScripted is a stdio MCP server that plays a transcript: each line
// it receives is appended to the record file, and a request is answered
// from the transcript's parts for its method ("answer tools/list"), or for
// a tools/call the tool ("answer tools/call echo"): "notify <key>" lines
// are sent first ($TOKEN is the request's progress token), then the
// "answer" part as the result or the "error" part as the error; "hold"
// answers nothing (the client cancels). Anything else is Method not found.
func serveScripted() int {
	b, err := os.ReadFile(os.Getenv(scriptEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	parts := map[string][]byte{}
	for _, f := range txtar.Parse(b).Files {
		parts[f.Name] = bytes.TrimSpace(f.Data)
	}
	rec, err := os.OpenFile(os.Getenv(recordEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer rec.Close()
	out := bufio.NewWriter(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := rec.Write(append(bytes.Clone(line), '\n')); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
				Meta struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &m) != nil || m.ID == nil || m.Method == "" {
			continue // a notification, or an answer
		}
		key := m.Method
		if m.Method == "tools/call" {
			key += " " + m.Params.Name
		}
		for _, n := range bytes.Split(parts["notify "+key], []byte("\n")) {
			if len(n) > 0 {
				fmt.Fprintf(out, "%s\n", bytes.ReplaceAll(n, []byte("$TOKEN"), m.Params.Meta.ProgressToken))
			}
		}
		if a, ok := parts["answer "+key]; ok {
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", m.ID, a)
		} else if e, ok := parts["error "+key]; ok {
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"error":%s}`+"\n", m.ID, e)
		} else if _, ok := parts["hold "+key]; !ok {
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`+"\n", m.ID)
		}
		if err := out.Flush(); err != nil {
			return 1
		}
	}
	return 0
}

// TestGoldenClientTranscripts: what ext-mcp sends to an MCP server, byte
// for byte, and what it makes of the answers, per protocol revision and
// transport, against testdata/golden/client-<rev>.txtar. The server — a
// stdio one ([serveScripted]) and a Streamable HTTP one
// ([scriptedHTTP]) — answers from the transcript's "answer", "error",
// "notify" and "hold" parts; "received <transport>" is everything the
// server got, in order, and "read <transport>" what ext-mcp published and
// returned (go test -run TestGoldenClientTranscripts . -update rewrites
// those).
func TestGoldenClientTranscripts(t *testing.T) {
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		for _, transport := range []string{"stdio", "http"} {
			t.Run(v+"/"+transport, func(t *testing.T) { goldenClient(t, v, transport) })
		}
	}
}

func goldenClient(t *testing.T, v, transport string) {
	path := filepath.Join("testdata", "golden", "client-"+v+".txtar")
	script, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pv := v
	if v == "2026-07-28" {
		pv = "latest"
	}
	var (
		srv       string
		received  func() []byte
		sawCancel func() bool
	)
	switch transport {
	case "stdio":
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		record := filepath.Join(t.TempDir(), "received")
		srv = selfServerEnv("scripted", map[string]string{scriptEnv: abs, recordEnv: record}, `"protocolVersion": "`+pv+`"`)
		received = func() []byte {
			b, err := os.ReadFile(record)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		sawCancel = func() bool { return true } // written before the call returns
	case "http":
		h := newScriptedHTTP(t, script)
		srv = fmt.Sprintf(`{"url": %q, "protocolVersion": %q}`, h.url, pv)
		received = h.received
		sawCancel = func() bool { return bytes.Contains(h.received(), []byte(mcpMethodCancelled)) }
	}
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"s": %s}}`, srv), nil)
	f.activate("alice")
	sdkPath := transport == "http" && v == "2026-07-28" // stateless: every request through go-sdk

	var read strings.Builder
	cat := f.h.UserCatalog("alice")
	for _, tl := range cat.Tools {
		b, _ := json.Marshal(tl)
		fmt.Fprintf(&read, "tool %s\n", b)
	}
	for _, p := range cat.Prompts {
		fmt.Fprintf(&read, "prompt %s %s\n", p.Name, p.Definition)
	}
	for _, r := range cat.Resources {
		fmt.Fprintf(&read, "resource %s %s\n", r.URI, r.Definition)
	}
	for _, r := range cat.ResourceTemplates {
		fmt.Fprintf(&read, "template %s %s\n", r.URITemplate, r.Definition)
	}
	call := func(name, args string, token json.RawMessage) {
		s := clientSession("alice")
		res, err := f.e.(ext.ToolCaller).CallTool(ctx(t), &ext.CallToolRequest{User: "alice", Name: name,
			Arguments: json.RawMessage(args), ProgressToken: token, Session: s})
		fmt.Fprintf(&read, "call %s: ", name)
		if err != nil {
			fmt.Fprintf(&read, "error %v\n", err)
		} else if b, err := res.JSON(); err != nil {
			fmt.Fprintf(&read, "bad result %v\n", err)
		} else {
			fmt.Fprintf(&read, "%s\n", b)
		}
		if token != nil && sdkPath {
			// On go-sdk's path the server's progress reaches ext-mcp
			// through go-sdk's handler, which may run after the call
			// ended: the note may be dropped. Not shown.
			fmt.Fprintf(&read, "  (progress through go-sdk: not shown)\n")
			return
		}
		for _, n := range s.Notes() {
			fmt.Fprintf(&read, "  note %s %s\n", n.Method, n.Params)
		}
	}
	call("s/echo", `{"text":"milk"}`, nil)
	call("s/fail", `{}`, nil)
	call("s/progress", `{}`, json.RawMessage(`"p-7"`))
	call("s/broken", `{}`, nil)
	b, err := f.e.(ext.PromptProvider).GetPrompt(ctx(t), &ext.GetPromptRequest{User: "alice", Name: "s/summary", Arguments: json.RawMessage(`{"topic":"milk"}`)})
	fmt.Fprintf(&read, "prompt get: %s %v\n", b, err)
	b, err = f.e.(ext.ResourceProvider).ReadResource(ctx(t), &ext.ReadResourceRequest{User: "alice", URI: "notes://all"})
	fmt.Fprintf(&read, "resource read: %s %v\n", b, err)
	// A call the client cancels once the server reported progress: the
	// server gets notifications/cancelled (over HTTP on a POST of its own,
	// sent in the background: waited for before the next call, so that
	// the order is the same every run).
	s := clientSession("alice")
	cctx, cancel := context.WithCancel(ctx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := f.e.(ext.ToolCaller).CallTool(cctx, &ext.CallToolRequest{User: "alice", Name: "s/wait",
			Arguments: json.RawMessage(`{}`), ProgressToken: json.RawMessage(`8`), Session: s})
		errc <- err
	}()
	if _, err := s.WaitNote(ctx(t), ext.MethodProgress); err != nil {
		t.Fatal(err)
	}
	cancel()
	fmt.Fprintf(&read, "call s/wait, cancelled: %v\n", <-errc)
	{
		for !sawCancel() {
			select {
			case <-ctx(t).Done():
				t.Fatal("the server never got notifications/cancelled")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// One more call: the server has read everything before it.
	call("s/echo", `{"text":"last"}`, nil)

	ar := txtar.Parse(script)
	// go-sdk's progress tokens of ext-mcp (callSDK) hold an address.
	volatile := regexp.MustCompile(`ah-go-0x[0-9a-f]+`)
	got := map[string][]byte{"received " + transport: volatile.ReplaceAll(received(), []byte("ah-go-<ptr>")),
		"read " + transport: volatile.ReplaceAll([]byte(read.String()), []byte("ah-go-<ptr>"))}
	for i, f := range ar.Files {
		if g, ok := got[f.Name]; ok {
			if !*update && !bytes.Equal(f.Data, g) {
				t.Errorf("%s: %q changed:\n--- want\n%s\n--- got\n%s", path, f.Name, f.Data, g)
			}
			ar.Files[i].Data = g
			delete(got, f.Name)
		}
	}
	for _, name := range []string{"received " + transport, "read " + transport} {
		if g, ok := got[name]; ok {
			if !*update {
				t.Errorf("%s has no %q part; got:\n%s", path, name, g)
			}
			ar.Files = append(ar.Files, txtar.File{Name: name, Data: g})
		}
	}
	if *update {
		goldenMu.Lock()
		defer goldenMu.Unlock()
		// Another transport's subtest may have rewritten its parts.
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fresh := txtar.Parse(cur)
		for _, mine := range ar.Files {
			if mine.Name != "received "+transport && mine.Name != "read "+transport {
				continue
			}
			found := false
			for i := range fresh.Files {
				if fresh.Files[i].Name == mine.Name {
					fresh.Files[i].Data, found = mine.Data, true
				}
			}
			if !found {
				fresh.Files = append(fresh.Files, mine)
			}
		}
		if err := os.WriteFile(path, txtar.Format(fresh), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// goldenMu orders the rewrites of a transcript (-update).
var goldenMu sync.Mutex

const mcpMethodCancelled = `"method":"notifications/cancelled"`

// scriptedHTTP is serveScripted's Streamable HTTP twin: a session
// ("Mcp-Session-Id: s-1") from initialize on; a request whose answer has
// "notify" parts is answered as an event stream, else as one JSON body;
// notifications and answers get 202; "hold" answers when the client goes
// away; DELETE 204. It records each POST and DELETE (its method, the MCP
// headers, the body); the standalone GET stream, which clients open at a
// time of their own, is refused (405) and not recorded.
type scriptedHTTP struct {
	url   string
	parts map[string][]byte
	mu    sync.Mutex
	rec   bytes.Buffer
}

func newScriptedHTTP(t *testing.T, script []byte) *scriptedHTTP {
	h := &scriptedHTTP{parts: map[string][]byte{}}
	for _, f := range txtar.Parse(script).Files {
		h.parts[f.Name] = bytes.TrimSpace(f.Data)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	h.url = srv.URL + "/mcp"
	return h
}

func (h *scriptedHTTP) received() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return bytes.Clone(h.rec.Bytes())
}

func (h *scriptedHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.rec.WriteString(r.Method + "\n")
	for _, k := range []string{"Accept", "Content-Type", "Mcp-Method", "Mcp-Name", "Mcp-Protocol-Version", "Mcp-Session-Id"} {
		if v := r.Header.Get(k); v != "" {
			fmt.Fprintf(&h.rec, "%s: %s\n", k, v)
		}
	}
	if len(body) > 0 {
		h.rec.Write(body)
		h.rec.WriteString("\n")
	}
	h.mu.Unlock()
	if r.Method == http.MethodDelete {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
			Meta struct {
				ProgressToken json.RawMessage `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil || m.ID == nil || m.Method == "" {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	key := m.Method
	if m.Method == "tools/call" {
		key += " " + m.Params.Name
	}
	if m.Method == "initialize" {
		w.Header().Set("Mcp-Session-Id", "s-1")
	}
	var answer []byte
	if a, ok := h.parts["answer "+key]; ok {
		answer = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, a)
	} else if e, ok := h.parts["error "+key]; ok {
		answer = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":%s}`, m.ID, e)
	} else if _, ok := h.parts["hold "+key]; !ok {
		answer = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID)
	}
	notes := h.parts["notify "+key]
	if len(notes) == 0 && answer != nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, n := range bytes.Split(notes, []byte("\n")) {
		if len(n) > 0 {
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", bytes.ReplaceAll(n, []byte("$TOKEN"), m.Params.Meta.ProgressToken))
		}
	}
	if answer != nil {
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", answer)
	}
	_ = http.NewResponseController(w).Flush()
	if answer == nil {
		<-r.Context().Done()
	}
}
