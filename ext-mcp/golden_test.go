package extmcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// TestGoldenClientTranscripts: what ext-mcp sends to a stdio MCP server,
// byte for byte, and what it makes of the answers, per protocol revision,
// against testdata/golden/client-<rev>.txtar. The server
// ([serveScripted]) answers from the transcript's "answer", "error",
// "notify" and "hold" parts; "received" is every line the server got, in
// order, and "read" what ext-mcp published and returned (go test -run
// TestGoldenClientTranscripts . -update rewrites those two).
func TestGoldenClientTranscripts(t *testing.T) {
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", "client-"+v+".txtar")
			script, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			record := filepath.Join(t.TempDir(), "received")
			pv := v
			if v == "2026-07-28" {
				pv = "latest"
			}
			srv := selfServerEnv("scripted", map[string]string{scriptEnv: abs, recordEnv: record}, `"protocolVersion": "`+pv+`"`)
			f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"s": %s}}`, srv), nil)
			f.activate("alice")

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
			// A call the client cancels once the server reported progress:
			// the server gets notifications/cancelled.
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
			// One more call: the server has read everything before it.
			call("s/echo", `{"text":"last"}`, nil)

			received, err := os.ReadFile(record)
			if err != nil {
				t.Fatal(err)
			}
			ar := txtar.Parse(script)
			got := map[string][]byte{"received": received, "read": []byte(read.String())}
			for i, f := range ar.Files {
				if g, ok := got[f.Name]; ok {
					if !*update && !bytes.Equal(f.Data, g) {
						t.Errorf("%s: %q changed:\n--- want\n%s\n--- got\n%s", path, f.Name, f.Data, g)
					}
					ar.Files[i].Data = g
					delete(got, f.Name)
				}
			}
			for _, name := range []string{"received", "read"} {
				if g, ok := got[name]; ok {
					if !*update {
						t.Errorf("%s has no %q part; got:\n%s", path, name, g)
					}
					ar.Files = append(ar.Files, txtar.File{Name: name, Data: g})
				}
			}
			if *update {
				if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
