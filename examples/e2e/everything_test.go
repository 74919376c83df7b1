//lint:file-ignore SA1019 roots, sampling and logging are deprecated from MCP 2026-07-28 but still spoken by the 2025 revisions the endpoint serves: this test drives them (issue 9).
package e2e_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// everythingBin returns the pinned @modelcontextprotocol/server-everything
// that ext-mcp's interop tests install (ext-mcp/testdata/npm). Missing, the
// test is skipped loudly, except under CI=true, where it fails.
func everythingBin(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("../../ext-mcp/testdata/npm/node_modules/.bin/mcp-server-everything")
	if err == nil {
		if _, err = os.Stat(bin); err == nil {
			return bin
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and @modelcontextprotocol/server-everything is missing (%v): .ci/run installs it with `npm ci` in ext-mcp/testdata/npm", err)
	}
	t.Skipf("SKIPPING THE SERVER-EVERYTHING END-TO-END TEST: @modelcontextprotocol/server-everything is missing (%v): run `npm ci` in ext-mcp/testdata/npm; under CI=true this fails", err)
	return ""
}

// everythingHTTP starts server-everything's Streamable HTTP transport on a
// free loopback port; its output (one line per request it receives) is
// in out. It is stopped when the test ends.
func everythingHTTP(t *testing.T, bin string) (url string, out *lockedBuffer) {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s: %v\n%s", addr, err, out)
		}
	}
	return "http://" + addr + "/mcp", out
}

// agent is a go-sdk client that declares sampling, elicitation and roots,
// answers each with something naming its user, and records what the
// endpoint sends it.
type agent struct {
	user   string
	client *mcp.Client
	cs     *mcp.ClientSession

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	logs     []*mcp.LoggingMessageParams
	asked    []string
	wake     chan struct{}
}

func newAgent(t *testing.T, url, token, user, version string) *agent {
	t.Helper()
	a := &agent{user: user, wake: make(chan struct{}, 1)}
	note := func(f func()) {
		a.mu.Lock()
		f()
		a.mu.Unlock()
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	a.client = mcp.NewClient(&mcp.Implementation{Name: "e2e-agent"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			note(func() { a.progress = append(a.progress, r.Params) })
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			note(func() { a.logs = append(a.logs, r.Params) })
		},
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			note(func() { a.asked = append(a.asked, "sampling") })
			return &mcp.CreateMessageResult{Model: "e2e", Role: "assistant", Content: &mcp.TextContent{Text: "sampled for " + user}}, nil
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			note(func() { a.asked = append(a.asked, "elicitation") })
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Name of " + user, "check": true, "interpretation": "technical"}}, nil
		},
	})
	a.client.AddRoots(&mcp.Root{URI: "file:///roots/" + user, Name: user})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := a.client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("%s connecting (%s): %v", user, version, err)
	}
	a.cs = cs
	t.Cleanup(func() { _ = cs.Close() })
	return a
}

// waitFor waits until cond holds on what the agent recorded.
func (a *agent) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		a.mu.Lock()
		ok := cond()
		a.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-a.wake:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: timed out waiting for %s", a.user, what)
		}
	}
}

func (a *agent) call(t *testing.T, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s calling %s: %v", a.user, name, err)
	}
	if res.IsError {
		t.Fatalf("%s calling %s: error result %s", a.user, name, text(res))
	}
	return res
}

// raw sends one JSON-RPC request on the agent's session and returns its
// result (the last message of an SSE answer).
func (a *agent) raw(t *testing.T, url, token, body string) json.RawMessage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", a.cs.ID())
	req.Header.Set("Mcp-Protocol-Version", a.cs.InitializeResult().ProtocolVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", body, resp.StatusCode, b)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var last string
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				last = d
			}
		}
		b = []byte(last)
	}
	var msg struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &msg); err != nil || msg.Error != nil {
		t.Fatalf("%s: %s %v", body, b, err)
	}
	return msg.Result
}

// inbox records what a server received, each message with the time it
// arrived: through a recording proxy in front of a Streamable HTTP server,
// or from a copy of a stdio server's stdin (tee).
type inbox struct {
	mu    sync.Mutex
	file  string // the stdin copy, for stdio
	items []received
}

type received struct {
	at  time.Time
	msg string
}

// proxy serves a recording reverse proxy to target (a Streamable HTTP
// server) and returns its URL.
func (in *inbox) proxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1 // SSE passes through at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			in.mu.Lock()
			in.items = append(in.items, received{time.Now(), string(b)})
			in.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + u.Path
}

// messages returns what arrived so far.
func (in *inbox) messages() []received {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.file != "" {
		b, _ := os.ReadFile(in.file)
		now := time.Now()
		for _, line := range strings.Split(string(b), "\n")[len(in.items):] {
			if strings.TrimSpace(line) != "" {
				in.items = append(in.items, received{now, line})
			}
		}
	}
	return slices.Clone(in.items)
}

// cancelOf waits until the server received the cancellation of the
// tools/call whose params contain marker, and returns when it arrived.
func (in *inbox) cancelOf(t *testing.T, marker string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		var id json.RawMessage
		for _, r := range in.messages() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					RequestID json.RawMessage `json:"requestId"`
				} `json:"params"`
			}
			if json.Unmarshal([]byte(r.msg), &m) != nil {
				continue
			}
			switch {
			case m.Method == "tools/call" && strings.Contains(r.msg, marker):
				id = m.ID
			case m.Method == "notifications/cancelled" && id != nil && string(m.Params.RequestID) == string(id):
				return r.at
			}
		}
	}
	t.Fatalf("the server never received the cancellation of the call with %s; it received:\n%v", marker, in.messages())
	return time.Time{}
}

// TestEverythingThroughTheEndpoint runs the real `agenthost serve` with the
// real ext-mcp and server-everything as an operator's server, over stdio
// and over Streamable HTTP, and drives everything MCP carries beside tool
// results through /mcp with go-sdk clients: progress, a cancellation that
// reaches the server, logging, sampling, elicitation, roots (in a call and
// after the client's roots changed), a task-augmented call through
// tasks/get and tasks/result, prompts, resources, templates, completions
// and instructions, for a user who has the server and one who does not;
// and a client on each protocol revision lists and calls a tool.
func TestEverythingThroughTheEndpoint(t *testing.T) {
	bin := everythingBin(t)
	b := build(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			in := &inbox{}
			var server map[string]any
			if transport == "http" {
				target, _ := everythingHTTP(t, bin)
				server = map[string]any{"url": in.proxy(t, target), "availability": "opt-in"}
			} else {
				in.file = filepath.Join(t.TempDir(), "stdin")
				server = map[string]any{"command": "/bin/sh", "args": []string{"-c", `tee -a "$EVERYTHING_INPUT" | exec "$EVERYTHING_BIN" stdio`},
					"env": map[string]string{"EVERYTHING_INPUT": in.file, "EVERYTHING_BIN": bin}, "availability": "opt-in"}
			}
			e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"everything": server, "notes": map[string]any{"command": b.notes}}})
			e.startServe("--log-level", "debug") // the revisions' test reads which calls took the stateless fast path
			token := func(user string) string {
				return strings.TrimSpace(e.must("", "token", "create", "--user", user, "--name", "e2e"))
			}
			aliceTok, bobTok := token("alice"), token("bob")
			// alice switches server-everything on; bob does not.
			e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "servers", `{"everything":true}`)

			alice := newAgent(t, e.url, aliceTok, "alice", "2025-11-25")
			bob := newAgent(t, e.url, bobTok, "bob", "2025-11-25")
			if in := alice.cs.InitializeResult().Instructions; !strings.Contains(in, "[everything] ") {
				t.Errorf("alice's instructions lack server-everything's: %.300q", in)
			}
			if in := bob.cs.InitializeResult().Instructions; strings.Contains(in, "[everything]") {
				t.Errorf("bob got server-everything's instructions: %.300q", in)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, a := range []*agent{alice, bob} {
				if err := a.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
					t.Fatal(err)
				}
			}

			t.Run("progress", func(t *testing.T) {
				p := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 0.6, "steps": 3}}
				p.SetProgressToken("alice-progress")
				if res, err := alice.cs.CallTool(ctx, p); err != nil || res.IsError {
					t.Fatalf("long-running operation: %v %v", err, res)
				}
				alice.waitFor(t, "3 progress notifications under alice's token", func() bool {
					n := 0
					for _, pr := range alice.progress {
						if pr.ProgressToken == "alice-progress" {
							n++
						}
					}
					return n == 3
				})
			})

			t.Run("cancel", func(t *testing.T) {
				p := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 31.5, "steps": 63}}
				p.SetProgressToken("alice-cancel")
				cctx, cancelCall := context.WithCancel(ctx)
				errc := make(chan error, 1)
				go func() {
					_, err := alice.cs.CallTool(cctx, p)
					errc <- err
				}()
				alice.waitFor(t, "the first progress of the call to cancel", func() bool {
					return slices.ContainsFunc(alice.progress, func(pr *mcp.ProgressNotificationParams) bool { return pr.ProgressToken == "alice-cancel" })
				})
				at := time.Now()
				cancelCall()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Errorf("the cancelled call: %v", err)
				}
				seen := in.cancelOf(t, `"duration":31.5`)
				t.Logf("server-everything (%s) received the cancellation %v after the client cancelled", transport, seen.Sub(at))
			})

			t.Run("logging", func(t *testing.T) {
				alice.call(t, "everything__toggle-simulated-logging", map[string]any{})
				alice.waitFor(t, "a log message of server-everything", func() bool {
					return slices.ContainsFunc(alice.logs, func(l *mcp.LoggingMessageParams) bool { return strings.HasPrefix(l.Logger, "everything") })
				})
				alice.call(t, "everything__toggle-simulated-logging", map[string]any{}) // off again
			})

			t.Run("sampling elicitation roots", func(t *testing.T) {
				if got := text(alice.call(t, "everything__trigger-sampling-request", map[string]any{"prompt": "hi", "maxTokens": 5})); !strings.Contains(got, "sampled for alice") {
					t.Errorf("sampling: %q", got)
				}
				if got := text(alice.call(t, "everything__trigger-elicitation-request", map[string]any{})); !strings.Contains(got, "Name of alice") {
					t.Errorf("elicitation: %q", got)
				}
				if got := text(alice.call(t, "everything__get-roots-list", map[string]any{})); !strings.Contains(got, "file:///roots/alice") {
					t.Errorf("roots: %q", got)
				}
				// The client's roots change: the server hears it and asks again,
				// outside any call, on the session's stream; it logs when it got
				// them. (No call is in flight meanwhile: ext-mcp hands a stdio
				// server's request to the call in flight, if any.)
				alice.client.AddRoots(&mcp.Root{URI: "file:///roots/alice-2", Name: "second"})
				alice.waitFor(t, "server-everything's log that it got 2 roots", func() bool {
					return slices.ContainsFunc(alice.logs, func(l *mcp.LoggingMessageParams) bool {
						return strings.Contains(fmt.Sprint(l.Data), "2 root(s) received")
					})
				})
				if got := text(alice.call(t, "everything__get-roots-list", map[string]any{})); !strings.Contains(got, "file:///roots/alice-2") {
					t.Errorf("roots after the change: %q", got)
				}
			})

			t.Run("tasks", func(t *testing.T) {
				created := alice.raw(t, e.url, aliceTok, `{"jsonrpc":"2.0","id":"t-1","method":"tools/call","params":{"name":"everything__simulate-research-query","arguments":{"topic":"tasks"},"task":{"ttl":60000}}}`)
				var ct struct {
					Task struct {
						TaskID string `json:"taskId"`
					} `json:"task"`
				}
				if err := json.Unmarshal(created, &ct); err != nil || !strings.HasPrefix(ct.Task.TaskID, "everything/") {
					t.Fatalf("the task-augmented call answered %s", created)
				}
				params := fmt.Sprintf(`{"taskId":%q}`, ct.Task.TaskID)
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
					got := alice.raw(t, e.url, aliceTok, `{"jsonrpc":"2.0","id":"t-2","method":"tasks/get","params":`+params+`}`)
					if strings.Contains(string(got), `"completed"`) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the task did not complete: %s", got)
					}
				}
				if got := alice.raw(t, e.url, aliceTok, `{"jsonrpc":"2.0","id":"t-3","method":"tasks/result","params":`+params+`}`); !strings.Contains(string(got), "Research Report") {
					t.Errorf("tasks/result: %.300s", got)
				}
			})

			t.Run("prompts resources completions", func(t *testing.T) {
				names := func(a *agent) []string {
					var out []string
					for p, err := range a.cs.Prompts(ctx, nil) {
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, p.Name)
					}
					return out
				}
				if got := names(alice); !slices.Contains(got, "everything__args-prompt") || !slices.Contains(got, "everything__completable-prompt") {
					t.Errorf("alice's prompts: %q", got)
				}
				if got := names(bob); slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "everything") }) {
					t.Errorf("bob lists alice's server's prompts: %q", got)
				}
				gp, err := alice.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Paris"}})
				if err != nil || !strings.Contains(mustJSON(gp), "Paris") {
					t.Errorf("args-prompt: %v %s", err, mustJSON(gp))
				}
				if _, err := bob.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Paris"}}); err == nil {
					t.Error("bob got a prompt of alice's server")
				}
				comp, err := alice.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "everything__completable-prompt"},
					Argument: mcp.CompleteParamsArgument{Name: "department", Value: "E"}})
				if err != nil || !slices.Contains(comp.Completion.Values, "Engineering") {
					t.Errorf("completion: %v %+v", err, comp)
				}
				var uris []string
				for r, err := range alice.cs.Resources(ctx, nil) {
					if err != nil {
						t.Fatal(err)
					}
					uris = append(uris, r.URI)
				}
				if len(uris) == 0 {
					t.Fatal("alice lists no resources")
				}
				rr, err := alice.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uris[0]})
				if err != nil || len(rr.Contents) == 0 {
					t.Errorf("reading %s: %v %+v", uris[0], err, rr)
				}
				var templates []string
				for rt, err := range alice.cs.ResourceTemplates(ctx, nil) {
					if err != nil {
						t.Fatal(err)
					}
					templates = append(templates, rt.URITemplate)
				}
				if !slices.Contains(templates, "demo://resource/dynamic/text/{resourceId}") {
					t.Errorf("alice's templates: %q", templates)
				}
				rr, err = alice.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/3"})
				if err != nil || len(rr.Contents) == 0 || rr.Contents[0].URI != "demo://resource/dynamic/text/3" {
					t.Errorf("reading through the template: %v %+v", err, rr)
				}
				if err := alice.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uris[0]}); err != nil {
					t.Errorf("subscribing to %s: %v", uris[0], err)
				}
				for r, err := range bob.cs.Resources(ctx, nil) {
					if err == nil && strings.HasPrefix(r.URI, "demo://") {
						t.Errorf("bob lists alice's resource %s", r.URI)
					}
				}
				if _, err := bob.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uris[0]}); err == nil {
					t.Errorf("bob read alice's resource %s", uris[0])
				}
			})

			t.Run("isolation", func(t *testing.T) {
				bob.mu.Lock()
				defer bob.mu.Unlock()
				for _, l := range bob.logs {
					if strings.HasPrefix(l.Logger, "everything") || strings.Contains(fmt.Sprint(l.Data), "alice") {
						t.Errorf("bob got alice's log message %+v", l)
					}
				}
				if len(bob.asked) > 0 || len(bob.progress) > 0 {
					t.Errorf("bob was asked %v and got progress %v", bob.asked, bob.progress)
				}
			})

			t.Run("revisions", func(t *testing.T) {
				for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25", ""} {
					a := newAgent(t, e.url, aliceTok, "alice", v)
					if got, want := a.cs.InitializeResult().ProtocolVersion, cmp.Or(v, "2026-07-28"); got != want {
						t.Errorf("pinned to %q: negotiated %q, want %q", v, got, want)
					}
					var tools []string
					for tl, err := range a.cs.Tools(ctx, nil) {
						if err != nil {
							t.Fatal(err)
						}
						tools = append(tools, tl.Name)
					}
					if !slices.Contains(tools, "everything__echo") || !slices.Contains(tools, "notes__echo") {
						t.Errorf("%q lists %q", v, tools)
					}
					if got := text(a.call(t, "everything__echo", map[string]any{"message": "rev " + v})); !strings.Contains(got, "rev "+v) {
						t.Errorf("%q: echo said %q", v, got)
					}
				}
				// The unpinned client's call (2026-07-28) took the endpoint's
				// fast path, as a plain stateless tools/call does; the
				// session's call of the other tests did not.
				fast := 0
				for _, line := range strings.Split(e.serveOut.String(), "\n") {
					if strings.Contains(line, `msg="mcp: a stateless tools/call took the fast path"`) &&
						strings.Contains(line, " user=alice") && strings.Contains(line, " tool=everything/echo") {
						fast++
					}
				}
				if fast != 1 {
					t.Errorf("the host logged %d calls of everything/echo on the stateless fast path, want 1", fast)
				}
			})
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
