package extmcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/ext/exttest"
)

// modeEnv selects what the re-executed test binary does instead of running
// tests (STYLE.md rule 9): it plays a misbehaving or special MCP server.
const modeEnv = "EXTMCP_TEST_MODE"

// bins holds the example servers built for this run.
var bins struct {
	notes, bearer, oauth string
	err                  error
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(modeEnv); mode != "" {
		os.Exit(serveMode(mode))
	}
	dir, err := os.MkdirTemp("", "extmcp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bins.notes, bins.bearer, bins.oauth = filepath.Join(dir, "notes"), filepath.Join(dir, "bearer"), filepath.Join(dir, "oauth")
	for bin, pkg := range map[string]string{bins.notes: "notes", bins.bearer: "bearer", bins.oauth: "oauth"} {
		out, err := exec.Command("go", "build", "-o", bin, "github.com/agenthost/agenthost/examples/servers/"+pkg).CombinedOutput()
		if err != nil {
			bins.err = fmt.Errorf("building the example %s server (the tests need the go.work workspace): %v\n%s", pkg, err, out)
		}
	}
	goleak.VerifyTestMain(cleanupM{m, dir})
}

// cleanupM removes the built servers once the tests ran (goleak's
// VerifyTestMain exits by itself).
type cleanupM struct {
	m   *testing.M
	dir string
}

func (c cleanupM) Run() int {
	code := c.m.Run()
	_ = os.RemoveAll(c.dir)
	return code
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// needBins fails the test when the example servers could not be built.
func needBins(t testing.TB) {
	t.Helper()
	if bins.err != nil {
		t.Fatal(bins.err)
	}
}

// serveMode runs one of the test-double servers and returns the exit code.
func serveMode(mode string) int {
	switch mode {
	case "crash": // exits at once
		fmt.Fprintln(os.Stderr, "crash: giving up")
		return 3
	case "noexec": // what bubblewrap says when the command is missing
		fmt.Fprintln(os.Stderr, "bwrap: execvp /nonexistent/server: No such file or directory")
		return 1
	case "leak": // fails, printing its token on stderr
		fmt.Fprintln(os.Stderr, "auth failed for "+os.Getenv("MCP_ACCESS_TOKEN"))
		return 1
	case "leakkey": // fails, printing its API_KEY on stderr
		fmt.Fprintln(os.Stderr, "bad key "+os.Getenv("API_KEY")+" for this account")
		return 1
	case "hang": // reads requests, never answers
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "garbage": // writes something that is not JSON-RPC
		fmt.Println("Welcome to my server v1.2 (this banner breaks the protocol)")
		fmt.Println("{not json")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "flaky": // crashes while a flag file exists, else serves
		if _, err := os.Stat(os.Getenv("FLAKY_FILE")); err == nil {
			return 4
		}
		return serveDynamic()
	case "dynamic":
		return serveDynamic()
	case "cancel":
		return serveCancel()
	case "big":
		if err := bigServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			return 1
		}
		return 0
	case "rawbig":
		return serveRawBig()
	case "scripted":
		return serveScripted()
	case "strict2026":
		return serveStrict2026()
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 2
}

// serveDynamic is a stdio server whose tool list grows on demand, and
// which returns every kind of content.
func serveDynamic() int {
	s := mcp.NewServer(&mcp.Implementation{Name: "dynamic", Version: "v0"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	text := func(t string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
	}
	s.AddTool(&mcp.Tool{Name: "a", Description: "tool a", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("a"), nil })
	s.AddTool(&mcp.Tool{Name: "grow", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddTool(&mcp.Tool{Name: "b", Description: "tool b", InputSchema: obj},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("b"), nil })
			return text("grown"), nil
		})
	s.AddTool(&mcp.Tool{Name: "vanish", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.RemoveTools("vanish")
			return text("gone"), nil
		})
	s.AddTool(&mcp.Tool{Name: "die", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fmt.Fprintln(os.Stderr, "fatal: lost the database")
			os.Exit(5)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "env", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(os.Getenv("MCP_ACCESS_TOKEN")), nil
		})
	s.AddTool(&mcp.Tool{Name: "keys", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(os.Getenv("API_KEY") + "|" + os.Getenv("PAT")), nil
		})
	s.AddTool(&mcp.Tool{Name: "kinds", InputSchema: obj, OutputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{
				Content: []mcp.Content{
					&mcp.TextContent{Text: "hello"},
					&mcp.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"},
					&mcp.AudioContent{Data: []byte{4, 5}, MIMEType: "audio/wav"},
					&mcp.ResourceLink{URI: "file:///x.txt", Name: "x", MIMEType: "text/plain"},
					&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///y.txt", MIMEType: "text/plain", Text: "why"}},
				},
				StructuredContent: map[string]any{"n": 1, "s": "two"},
				IsError:           true,
			}, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// serveCancel is a stdio server whose tool "block" reports progress once,
// then waits until the client cancels it and writes the time it saw the
// cancellation to the file CANCEL_FILE: the proof that a cancel reached
// the server.
func serveCancel() int {
	s := mcp.NewServer(&mcp.Implementation{Name: "cancel", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "started"})
			}
			<-ctx.Done()
			_ = os.WriteFile(os.Getenv("CANCEL_FILE"), []byte(time.Now().Format(time.RFC3339Nano)), 0o600)
			return nil, ctx.Err()
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// bigSize is the size of the big results the test servers return.
const bigSize = 15_000_000

// bigServer offers results of any size: the tool big (its argument bytes),
// the prompt big (its argument bytes) and the resources big://resource
// (100,000 bytes) and small://resource (10).
func bigServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "v0"}, nil)
	type bigIn struct {
		Bytes int `json:"bytes" jsonschema:"how many bytes of text to return"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Return a text of the given size."},
		func(_ context.Context, _ *mcp.CallToolRequest, in bigIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "big", Arguments: []*mcp.PromptArgument{{Name: "bytes", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			n, _ := strconv.Atoi(req.Params.Arguments["bytes"])
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: strings.Repeat("x", n)}}}}, nil
		})
	for uri, n := range map[string]int{"big://resource": 100_000, "small://resource": 10} {
		s.AddResource(&mcp.Resource{Name: uri, URI: uri, MIMEType: "text/plain"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: strings.Repeat("x", n)}}}, nil
			})
	}
	return s
}

// serveRawBig is a hand-written stdio server whose answers no encoder
// would write: the tool idlast answers bigSize bytes with its id after the
// result, noisy sends a notification of bigSize bytes before answering,
// askbig sends a sampling request of bigSize bytes and answers with the
// answer it got, endless answers with a line that never ends, small
// answers "ok".
func serveRawBig() int {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	write := func(parts ...string) bool {
		for _, p := range parts {
			if _, err := out.WriteString(p); err != nil {
				return false
			}
		}
		return out.Flush() == nil
	}
	text := func(s string) string { return `{"content":[{"type":"text","text":"` + s + `"}]}` }
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &m) != nil || m.ID == nil {
			continue // notifications
		}
		id := string(m.ID)
		answer := func(result string) bool { return write(`{"jsonrpc":"2.0","id":`, id, `,"result":`, result, "}\n") }
		ok := true
		switch m.Method {
		case "initialize":
			ok = answer(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"rawbig","version":"v0"}}`)
		case "tools/list":
			tools := ""
			for i, n := range []string{"idlast", "noisy", "askbig", "endless", "small"} {
				if i > 0 {
					tools += ","
				}
				tools += `{"name":"` + n + `","inputSchema":{"type":"object"}}`
			}
			ok = answer(`{"tools":[` + tools + `]}`)
		case "tools/call":
			switch m.Params.Name {
			case "idlast":
				ok = write(`{"jsonrpc":"2.0","result":`, text(strings.Repeat("x", bigSize)), `,"id":`, id, "}\n")
			case "noisy":
				ok = write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`, strings.Repeat("x", bigSize), `"}}`+"\n") &&
					answer(text("ok"))
			case "askbig":
				ok = write(`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"maxTokens":1,"messages":[{"role":"user","content":{"type":"text","text":"`,
					strings.Repeat("x", bigSize), `"}}]}}`+"\n")
				got, err := in.ReadBytes('\n')
				if err != nil {
					return 0
				}
				b, _ := json.Marshal(string(bytes.TrimSpace(got)))
				ok = ok && answer(text(strings.Trim(string(b), `"`)))
			case "endless":
				ok = write(`{"jsonrpc":"2.0","id":`, id, `,"result":{"content":[{"type":"text","text":"`)
				chunk := strings.Repeat("x", 1<<20)
				for ok {
					ok = write(chunk)
				}
			default:
				ok = answer(text("ok"))
			}
		default:
			ok = write(`{"jsonrpc":"2.0","id":`, id, `,"error":{"code":-32601,"message":"method not found"}}`+"\n")
		}
		if !ok {
			return 0
		}
	}
}

// logBuffer collects the extension's logs for canary scans.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fixture is an extension under test, configured on a FakeHost, reached
// through one carrier.
type fixture struct {
	t    testing.TB
	x    *extmcp.Extension
	e    ext.Extension
	h    *exttest.FakeHost
	logs *logBuffer
}

// newFixture configures a fresh extension on a FakeHost. wrap, when
// given, wraps the host the extension sees.
func newFixture(t testing.TB, carrier string, config string, opts *extmcp.Options, wrap ...func(*exttest.FakeHost) ext.Host) *fixture {
	t.Helper()
	return newFixtureWith(t, carrier, config, opts, nil, wrap...)
}

// newFixtureAt is newFixture for a host whose public URL is publicURL.
func newFixtureAt(t testing.TB, carrier string, config, publicURL string, opts *extmcp.Options, wrap ...func(*exttest.FakeHost) ext.Host) *fixture {
	t.Helper()
	return newFixtureWith(t, carrier, config, opts, func(cr *ext.ConfigureRequest) { cr.PublicURL = publicURL }, wrap...)
}

// newFixtureWith is newFixture with more of the Configure request (such as
// the host's listen address) set by req.
func newFixtureWith(t testing.TB, carrier string, config string, opts *extmcp.Options, req func(*ext.ConfigureRequest),
	wrap ...func(*exttest.FakeHost) ext.Host) *fixture {
	t.Helper()
	logs := &logBuffer{}
	var o extmcp.Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = newLogger(logs)
	}
	x := extmcp.New(&o)
	h := exttest.NewFakeHost(t)
	h.Services = x
	var e ext.Extension = x
	switch carrier {
	case "grpc":
		e = exttest.Connect(t, x, nil)
	case "grpc-fd":
		e = exttest.Connect(t, x, &exttest.ConnectOptions{FDPassing: true})
	case "grpc-socket":
		e = exttest.Connect(t, x, &exttest.ConnectOptions{FDPassing: true, CallChannel: true})
	}
	f := &fixture{t: t, x: x, e: e, h: h, logs: logs}
	var host ext.Host = h
	for _, w := range wrap {
		host = w(h)
	}
	cr := &ext.ConfigureRequest{Name: "mcp", Config: json.RawMessage(config), Host: host}
	if req != nil {
		req(cr)
	}
	if err := e.Configure(ctx(t), cr); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if n := h.ServicesRunning(); n != 0 {
			t.Errorf("%d server processes still running after Shutdown", n)
		}
	})
	return f
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func (f *fixture) activate(user string) {
	f.t.Helper()
	if err := f.e.(ext.UserLifecycle).Activate(ctx(f.t), user); err != nil {
		f.t.Fatalf("Activate(%q): %v", user, err)
	}
}

func (f *fixture) call(user, name, args string) (*ext.CallToolResult, error) {
	f.t.Helper()
	res, err := f.e.(ext.ToolCaller).CallTool(ctx(f.t), &ext.CallToolRequest{User: user, Name: name, Arguments: json.RawMessage(args)})
	if err != nil {
		return nil, err
	}
	// Out of process the result arrives raw: the tests read its fields.
	return res.Fields()
}

// mustCall calls and fails the test on an error or an error result.
func (f *fixture) mustCall(user, name, args string) *ext.CallToolResult {
	f.t.Helper()
	res, err := f.call(user, name, args)
	if err != nil {
		f.t.Fatalf("%s calling %s: %v", user, name, err)
	}
	if res.IsError {
		f.t.Fatalf("%s calling %s: error result %q", user, name, res.Text())
	}
	return res
}

func (f *fixture) names(user string) []string {
	var out []string
	for _, t := range f.h.UserTools(user) {
		out = append(out, t.Name)
	}
	return out
}

func (f *fixture) setToggles(user, values string) {
	f.t.Helper()
	if err := f.h.UserStore(user).Settings().Set(ctx(f.t), extmcp.SectionServers, json.RawMessage(values)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) setSecret(user, name, value string) {
	f.t.Helper()
	if err := f.h.UserStore(user).Secrets().Set(ctx(f.t), name, value); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) status(user string) []ext.StatusEntry {
	f.t.Helper()
	st, err := f.e.(ext.StatusReporter).Status(ctx(f.t), user)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fixture) statusOf(user, server string) ext.StatusEntry {
	for _, s := range f.status(user) {
		if s.Name == server {
			return s
		}
	}
	return ext.StatusEntry{}
}

// waitTools waits until the user's published tools satisfy cond.
func (f *fixture) waitTools(user string, cond func(names []string) bool) []string {
	f.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tools, err := f.h.WaitUserTools(c, user, func(ts []ext.Tool) bool {
		var names []string
		for _, t := range ts {
			names = append(names, t.Name)
		}
		return cond(names)
	})
	var names []string
	for _, t := range tools {
		names = append(names, t.Name)
	}
	if err != nil {
		f.t.Fatalf("tools of %s: %q: %v", user, names, err)
	}
	return names
}

// selfServer is a config entry that runs this test binary in a mode.
func selfServer(mode string, extra string) string { return selfServerEnv(mode, nil, extra) }

// selfServerEnv is selfServer with more environment.
func selfServerEnv(mode string, env map[string]string, extra string) string {
	exe, _ := os.Executable()
	all := map[string]string{modeEnv: mode}
	for k, v := range env {
		all[k] = v
	}
	b, _ := json.Marshal(all)
	s := fmt.Sprintf(`{"command": %q, "env": %s`, exe, b)
	if extra != "" {
		s += ", " + extra
	}
	return s + "}"
}

func notesServer(extra string) string {
	s := fmt.Sprintf(`{"command": %q, "args": ["-reveal-token"]`, bins.notes)
	if extra != "" {
		s += ", " + extra
	}
	return s + "}"
}

func hasPrefix(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}
