package extmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// everythingHTTP starts server-everything's Streamable HTTP transport on a
// free loopback port and returns its MCP URL; it is stopped when the test
// ends.
func everythingHTTP(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr + "/mcp"
}

// clientSession is a client session for the tests: it declares sampling,
// elicitation and roots and answers each with something that names user.
func clientSession(user string) *exttest.Session {
	return &exttest.Session{
		Caps: json.RawMessage(`{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}`),
		Answer: func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
			switch method {
			case ext.MethodCreateMessage:
				return json.RawMessage(`{"role":"assistant","model":"test","content":{"type":"text","text":"sampled for ` + user + `"}}`), nil
			case ext.MethodElicit:
				return json.RawMessage(`{"action":"accept","content":{"name":"Name of ` + user + `","check":true,"interpretation":"technical"}}`), nil
			case ext.MethodListRoots:
				return json.RawMessage(`{"roots":[{"uri":"file:///roots/` + user + `","name":"` + user + `"}]}`), nil
			}
			return nil, ext.ErrUnimplemented
		},
	}
}

// TestEverythingBesideTools exercises, against the reference TypeScript
// server over stdio and over Streamable HTTP, everything MCP carries
// besides tool results: progress, logging, sampling, elicitation, roots,
// tasks, prompts, resources, templates, completions and instructions, for
// two users who never see each other's.
func TestEverythingBesideTools(t *testing.T) {
	bin := everythingBin(t)
	t.Parallel()
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			server := fmt.Sprintf(`{"command": %q, "args": ["stdio"]}`, bin)
			if transport == "http" {
				server = fmt.Sprintf(`{"url": %q}`, everythingHTTP(t, bin))
			}
			f := newFixture(t, "grpc-socket", fmt.Sprintf(`{"mcpServers": {"everything": %s}}`, server), nil)
			// Roots asked outside a call go to the user's current session.
			f.h.UserSession = clientSession("alice")
			f.activate("alice")
			for _, want := range []string{"get-roots-list", "trigger-sampling-request", "trigger-elicitation-request", "simulate-research-query", "trigger-long-running-operation"} {
				if !slices.Contains(f.names("alice"), "everything/"+want) {
					t.Fatalf("tool %s missing (the client's capabilities must keep it): %q", want, f.names("alice"))
				}
			}
			c := ctx(t)
			tc := f.e.(ext.ToolCaller)
			call := func(name, args string, sess ext.Session, progress bool) *ext.CallToolResult {
				t.Helper()
				req := &ext.CallToolRequest{User: "alice", Name: "everything/" + name, Arguments: json.RawMessage(args), Session: sess}
				if progress {
					req.ProgressToken = json.RawMessage(`"p-1"`)
				}
				res, err := tc.CallTool(c, req)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if res.IsError {
					t.Fatalf("%s: error result %s", name, res.Text())
				}
				return res
			}

			t.Run("progress", func(t *testing.T) {
				s := clientSession("alice")
				call("trigger-long-running-operation", `{"duration":0.6,"steps":3}`, s, true)
				var n int
				for _, note := range s.Notes() {
					if note.Method == ext.MethodProgress {
						n++
					}
				}
				if n != 3 {
					t.Errorf("progress notifications = %d, want 3: %+v", n, s.Notes())
				}
			})
			t.Run("sampling and elicitation", func(t *testing.T) {
				s := clientSession("alice")
				if got := call("trigger-sampling-request", `{"prompt":"hi","maxTokens":5}`, s, false).Text(); !strings.Contains(got, "sampled for alice") {
					t.Errorf("sampling result: %q", got)
				}
				if got := call("trigger-elicitation-request", `{}`, s, false).Text(); !strings.Contains(got, "Name of alice") {
					t.Errorf("elicitation result: %q", got)
				}
				// A client that cannot sample: the server hears a refusal,
				// the call still ends with the server's own answer.
				res, err := tc.CallTool(c, &ext.CallToolRequest{User: "alice", Name: "everything/trigger-sampling-request",
					Arguments: json.RawMessage(`{"prompt":"hi"}`), Session: &exttest.Session{}})
				if err != nil || !res.IsError || !strings.Contains(res.Text(), "sampling") {
					t.Errorf("sampling without the capability: %v %q; want an error result about sampling", err, res.Text())
				}
			})
			t.Run("roots", func(t *testing.T) {
				if got := call("get-roots-list", `{}`, clientSession("alice"), false).Text(); !strings.Contains(got, "file:///roots/alice") {
					t.Errorf("roots: %q", got)
				}
			})
			t.Run("logging", func(t *testing.T) {
				call("toggle-simulated-logging", `{}`, clientSession("alice"), false)
				n, err := f.h.WaitNotification(c, "alice", ext.MethodLogMessage)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(n.Params), `"logger":"everything`) {
					t.Errorf("log message %s: want the server's name as logger", n.Params)
				}
				call("toggle-simulated-logging", `{}`, clientSession("alice"), false) // off again
			})
			t.Run("tasks", func(t *testing.T) {
				res, err := tc.CallTool(c, &ext.CallToolRequest{User: "alice", Name: "everything/simulate-research-query",
					Arguments: json.RawMessage(`{"topic":"tasks"}`), Task: json.RawMessage(`{"ttl":60000}`), Session: clientSession("alice")})
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := res.JSON()
				var created struct {
					Task struct {
						TaskID string `json:"taskId"`
						Status string `json:"status"`
					} `json:"task"`
				}
				if err := json.Unmarshal(raw, &created); err != nil || !strings.HasPrefix(created.Task.TaskID, "everything/") {
					t.Fatalf("task-augmented call answered %s; want a CreateTaskResult with a namespaced task ID", raw)
				}
				th := f.e.(ext.TaskHandler)
				params := json.RawMessage(fmt.Sprintf(`{"taskId":%q}`, created.Task.TaskID))
				for deadline := time.Now().Add(20 * time.Second); ; {
					b, err := th.HandleTask(c, &ext.TaskRequest{User: "alice", Method: ext.MethodTaskGet, Params: params})
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(string(b), `"completed"`) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the task did not complete: %s", b)
					}
					time.Sleep(200 * time.Millisecond)
				}
				b, err := th.HandleTask(c, &ext.TaskRequest{User: "alice", Method: ext.MethodTaskResult, Params: params, Session: clientSession("alice")})
				if err != nil || !strings.Contains(string(b), "Research Report") {
					t.Errorf("tasks/result: %.300s, %v", b, err)
				}
				b, err = th.HandleTask(c, &ext.TaskRequest{User: "alice", Method: ext.MethodTaskList, Params: json.RawMessage(`{}`)})
				if err != nil || !strings.Contains(string(b), created.Task.TaskID) {
					t.Errorf("tasks/list: %.300s, %v", b, err)
				}
				if _, err := th.HandleTask(c, &ext.TaskRequest{User: "bob", Method: ext.MethodTaskGet, Params: params}); err == nil {
					t.Error("bob reached alice's task")
				}
			})
			t.Run("prompts resources completions instructions", func(t *testing.T) {
				cat := f.h.UserCatalog("alice")
				var prompts, resources, templates []string
				for _, p := range cat.Prompts {
					prompts = append(prompts, p.Name)
				}
				for _, r := range cat.Resources {
					resources = append(resources, r.URI)
					if r.Server != "everything" {
						t.Errorf("resource %s names server %q, want everything (scoped tokens place it by that)", r.URI, r.Server)
					}
				}
				for _, tm := range cat.ResourceTemplates {
					templates = append(templates, tm.URITemplate)
					if tm.Server != "everything" {
						t.Errorf("template %s names server %q, want everything", tm.URITemplate, tm.Server)
					}
				}
				if !slices.Contains(prompts, "everything/args-prompt") || !slices.Contains(prompts, "everything/completable-prompt") {
					t.Errorf("prompts: %q", prompts)
				}
				if len(resources) == 0 || !slices.Contains(templates, "demo://resource/dynamic/text/{resourceId}") {
					t.Errorf("resources %q, templates %q", resources, templates)
				}
				if len(cat.Instructions) != 1 || cat.Instructions[0].Source != "everything" || cat.Instructions[0].Text == "" {
					t.Errorf("instructions: %+v", cat.Instructions)
				}
				b, err := f.e.(ext.PromptProvider).GetPrompt(c, &ext.GetPromptRequest{User: "alice", Name: "everything/args-prompt", Arguments: json.RawMessage(`{"city":"Paris"}`)})
				if err != nil || !strings.Contains(string(b), "Paris") {
					t.Errorf("args-prompt: %s, %v", b, err)
				}
				rp := f.e.(ext.ResourceProvider)
				b, err = rp.ReadResource(c, &ext.ReadResourceRequest{User: "alice", URI: resources[0]})
				if err != nil || !strings.Contains(string(b), `"contents"`) {
					t.Errorf("read %s: %.200s, %v", resources[0], b, err)
				}
				b, err = rp.ReadResource(c, &ext.ReadResourceRequest{User: "alice", URI: "demo://resource/dynamic/text/3"})
				if err != nil || !strings.Contains(string(b), "demo://resource/dynamic/text/3") {
					t.Errorf("read through a template: %.200s, %v", b, err)
				}
				if _, err := rp.ReadResource(c, &ext.ReadResourceRequest{User: "alice", URI: "nope://x"}); !errors.Is(err, ext.ErrNotFound) {
					t.Errorf("read of an unknown URI: %v; want ErrNotFound", err)
				}
				if err := rp.SubscribeResource(c, &ext.SubscribeRequest{User: "alice", URI: resources[0]}); err != nil {
					t.Errorf("subscribe: %v", err)
				}
				b, err = f.e.(ext.Completer).Complete(c, &ext.CompleteRequest{User: "alice",
					Params: json.RawMessage(`{"ref":{"type":"ref/prompt","name":"everything/completable-prompt"},"argument":{"name":"department","value":"E"}}`)})
				if err != nil || !strings.Contains(string(b), "Engineering") {
					t.Errorf("completion: %s, %v", b, err)
				}
			})
			t.Run("isolation", func(t *testing.T) {
				bobAsked := &exttest.Session{}
				f.h.UserSession = bobAsked
				f.activate("bob")
				if got := f.mustCall("bob", "everything/echo", `{"message":"b"}`).Text(); !strings.Contains(got, "b") {
					t.Errorf("bob's echo: %q", got)
				}
				for _, n := range f.h.Notifications("bob") {
					if strings.Contains(string(n.Params), "alice") {
						t.Errorf("bob got alice's notification: %+v", n)
					}
				}
				if _, err := f.e.(ext.PromptProvider).GetPrompt(c, &ext.GetPromptRequest{User: "carol", Name: "everything/args-prompt"}); err == nil {
					t.Error("an inactive user reached a prompt")
				}
			})
		})
	}
}

// TestCancelReachesServer cancels a call and checks that the server's
// handler saw it, and how fast (the figure is logged).
func TestCancelReachesServer(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "cancelled")
	f := newFixture(t, "grpc-socket", fmt.Sprintf(`{"mcpServers": {"c": %s}}`,
		selfServerEnv("cancel", map[string]string{"CANCEL_FILE": marker}, "")), nil)
	f.activate("alice")
	s := clientSession("alice")
	cctx, cancel := context.WithCancel(ctx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := f.e.(ext.ToolCaller).CallTool(cctx, &ext.CallToolRequest{User: "alice", Name: "c/block",
			Arguments: json.RawMessage(`{}`), ProgressToken: json.RawMessage(`1`), Session: s})
		errc <- err
	}()
	if _, err := s.WaitNote(ctx(t), ext.MethodProgress); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(marker)
		if err == nil && len(b) > 0 {
			seen, err := time.Parse(time.RFC3339Nano, string(b))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the server saw the cancellation %v after it", seen.Sub(at))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the cancellation")
		}
	}
}

// TestDuplicateResourceURIs (issue 17): two servers of a user offering the
// same resource URIs: the first by name serves them, and the other's
// status says which URIs it loses, and to which server.
func TestDuplicateResourceURIs(t *testing.T) {
	bin := everythingBin(t)
	t.Parallel()
	srv := fmt.Sprintf(`{"command": %q, "args": ["stdio"]}`, bin)
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"zeta": %s, "alpha": %s}}`, srv, srv), nil)
	f.activate("alice")
	if st := f.statusOf("alice", "alpha"); st.State != "connected" || strings.Contains(st.Reason, "shadowed") {
		t.Errorf("alpha, first by name: %+v; want connected, nothing shadowed", st)
	}
	st := f.statusOf("alice", "zeta")
	if st.State != "connected" || !strings.Contains(st.Reason, "shadowed") || !strings.Contains(st.Reason, "is served by alpha") ||
		!strings.Contains(st.Reason, `resource "demo://`) {
		t.Errorf("zeta, second by name: %+v; want its shadowed URIs, served by alpha", st)
	}
}
