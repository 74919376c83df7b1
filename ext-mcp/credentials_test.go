package extmcp_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/ext/exttest"
)

// canary returns a unique secret for principal (SECURITY.md §7).
func canary(principal string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "CANARY-" + principal + "-" + hex.EncodeToString(b)
}

// recorder is a remote MCP server that records the headers it receives.
// Its whoami tool returns the Authorization header of the call.
type recorder struct {
	URL string

	mu      sync.Mutex
	auth    []string // every Authorization value received ("" when none)
	headers []http.Header
	require string // when set, any other bearer gets 401
}

func newRecorder(t *testing.T, sse bool) *recorder {
	t.Helper()
	r := &recorder{}
	// A server per session, so that whoami can answer with the header of
	// the request that opened it where the transport gives no per-call
	// headers (SSE).
	newServer := func(open *http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "recorder", Version: "v0"}, nil)
		s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				auth := open.Header.Get("Authorization")
				if req.Extra != nil && req.Extra.Header != nil {
					auth = req.Extra.Header.Get("Authorization")
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: auth}}}, nil
			})
		return s
	}
	var h http.Handler
	if sse {
		h = mcp.NewSSEHandler(newServer, nil)
	} else {
		h = mcp.NewStreamableHTTPHandler(newServer, nil)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		r.headers = append(r.headers, req.Header.Clone())
		require := r.require
		r.mu.Unlock()
		if require != "" && req.Header.Get("Authorization") != "Bearer "+require {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	r.URL = srv.URL
	return r
}

func (r *recorder) seen() ([]string, []http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...), append([]http.Header(nil), r.headers...)
}

// TestCanaryCredentials gives every user a unique canary token for each
// server and checks that each server sees only its user's token, that a
// configured token is never sent for personal servers, and that no token
// leaks into another user's results, the status, the tools or the logs.
func TestCanaryCredentials(t *testing.T) {
	needBins(t)
	t.Parallel()
	for _, carrier := range []string{"inprocess", "grpc", "grpc-fd"} {
		t.Run(carrier, func(t *testing.T) {
			t.Parallel()
			web, sse, strict := newRecorder(t, false), newRecorder(t, true), newRecorder(t, false)
			configTok := canary("CONFIG")
			cfg := fmt.Sprintf(`{"mcpServers": {
				"cli": %s,
				"web": {"url": %q, "headers": {"authorization": "Bearer %s", "X-Team": "blue", "X-User": "user-${user}"}},
				"sse": {"url": %q, "type": "sse", "headers": {"AUTHORIZATION": "Bearer %s"}},
				"strict": {"url": %q}}}`,
				notesServer(fmt.Sprintf(`"env": {"MCP_ACCESS_TOKEN": %q}`, configTok)),
				web.URL, configTok, sse.URL, configTok, strict.URL)
			f := newFixture(t, carrier, cfg, nil)
			users := []string{"alice", "bob", "carol"} // carol has no tokens
			tokens := map[string]map[string]string{}
			for _, u := range users[:2] {
				tokens[u] = map[string]string{}
				for _, s := range []string{"cli", "web", "sse", "strict"} {
					tokens[u][s] = canary(u + "-" + s)
					f.setSecret(u, extmcp.TokenSecret(s), tokens[u][s])
				}
			}
			strict.mu.Lock()
			strict.require = tokens["alice"]["strict"]
			strict.mu.Unlock()
			var results []string
			for _, u := range users {
				f.activate(u)
				who := f.mustCall(u, "cli/whoami", `{}`)
				var out struct{ User, Token string }
				_ = json.Unmarshal(who.StructuredContent, &out)
				if out.Token != tokens[u]["cli"] {
					t.Errorf("%s: the stdio server saw token %q, want %q", u, out.Token, tokens[u]["cli"])
				}
				for _, s := range []string{"web", "sse"} {
					got := f.mustCall(u, s+"/whoami", `{}`).Text()
					want := ""
					if tokens[u] != nil {
						want = "Bearer " + tokens[u][s]
					}
					if got != want {
						t.Errorf("%s: %s saw Authorization %q, want %q", u, s, got, want)
					}
					results = append(results, u+"\x00"+got)
				}
				results = append(results, u+"\x00"+string(who.Content)+string(who.StructuredContent))
			}
			// strict accepts alice only: bob's token is refused
			// (quarantined), carol has none and is asked to sign in (or to
			// store one); no reason holds a token.
			if st := f.statusOf("alice", "strict"); st.State != "connected" {
				t.Errorf("alice on strict: %+v", st)
			}
			if st := f.statusOf("bob", "strict"); st.State != "quarantined" {
				t.Errorf("bob on strict: %+v; want quarantined", st)
			}
			if st := f.statusOf("carol", "strict"); st.State != ext.StateNeedsSignIn || !strings.Contains(st.Reason, "token:strict") {
				t.Errorf("carol on strict: %+v; want needs sign-in, naming the token secret too", st)
			}
			// Every request each remote server got carried a user's own
			// token for that server, or none; never the configured one.
			for name, r := range map[string]*recorder{"web": web, "sse": sse, "strict": strict} {
				auths, headers := r.seen()
				for _, a := range auths {
					ok := a == ""
					for _, u := range users[:2] {
						ok = ok || a == "Bearer "+tokens[u][name]
					}
					if !ok {
						t.Errorf("%s received Authorization %q", name, a)
					}
				}
				if name == "web" {
					for i, h := range headers {
						if h.Get("X-Team") != "blue" {
							t.Errorf("web lost the configured X-Team header: %v", h)
							break
						}
						// ${user} is each request's own user (issue 17).
						want := "user-carol"
						for _, u := range users[:2] {
							if auths[i] == "Bearer "+tokens[u][name] {
								want = "user-" + u
							}
						}
						if got := h.Get("X-User"); got != want {
							t.Errorf("web got X-User %q with Authorization %q; want %q", got, auths[i], want)
							break
						}
					}
				}
			}
			// Scan everything else for canaries.
			var everything strings.Builder
			everything.WriteString(f.logs.String())
			for _, st := range f.status("") {
				everything.WriteString(fmt.Sprintf("%+v\n", st))
			}
			for _, u := range users {
				b, _ := json.Marshal(f.h.UserTools(u))
				everything.Write(b)
			}
			all := everything.String()
			if strings.Contains(all, "CANARY-") {
				i := strings.Index(all, "CANARY-")
				t.Errorf("a token leaked into logs, status or tools: …%s…", all[max(0, i-80):min(len(all), i+60)])
			}
			for _, r := range results {
				owner, text, _ := strings.Cut(r, "\x00")
				for _, u := range users[:2] {
					for _, tok := range tokens[u] {
						if u != owner && strings.Contains(text, tok) {
							t.Errorf("%s's token in %s's result", u, owner)
						}
					}
				}
				if strings.Contains(text, configTok) {
					t.Errorf("the configured token reached %s", owner)
				}
			}
		})
	}
}

// countingHost counts the secret reads the extension makes.
type countingHost struct {
	*exttest.FakeHost
	reads atomic.Int64
}

func (h *countingHost) UserStore(u string) ext.UserStore {
	return countingStore{h.FakeHost.UserStore(u), h}
}

type countingStore struct {
	ext.UserStore
	h *countingHost
}

func (s countingStore) Secrets() ext.Secrets { return countingSecrets{s.UserStore.Secrets(), s.h} }

type countingSecrets struct {
	ext.Secrets
	h *countingHost
}

func (s countingSecrets) Get(ctx context.Context, name string) (string, error) {
	s.h.reads.Add(1)
	return s.Secrets.Get(ctx, name)
}

// TestSharedServer checks that a shared server lends the operator's
// credential to the users on its allowlist only, and refuses everyone
// else: an unidentified caller before any credential is read, a user not
// on the list, a user who switched it off.
func TestSharedServer(t *testing.T) {
	needBins(t)
	t.Parallel()
	rec := newRecorder(t, false)
	operatorTok, operatorCLI, configTok := canary("OPERATOR"), canary("OPERATOR"), canary("CONFIG")
	cfg := fmt.Sprintf(`{"mcpServers": {
		"team": {"url": %q, "credentials": "shared", "users": ["alice"], "sharedAuthority": "the team's service account"},
		"teamcli": %s}}`, rec.URL,
		notesServer(fmt.Sprintf(`"credentials": "shared", "users": ["alice"], "env": {"MCP_ACCESS_TOKEN": %q}`, configTok)))
	var counter *countingHost
	f := newFixture(t, "inprocess", cfg, nil, func(h *exttest.FakeHost) ext.Host {
		counter = &countingHost{FakeHost: h}
		return counter
	})
	f.setSecret(extmcp.OperatorUser, extmcp.TokenSecret("team"), operatorTok)
	f.setSecret(extmcp.OperatorUser, extmcp.TokenSecret("teamcli"), operatorCLI)
	f.setSecret("alice", extmcp.TokenSecret("team"), canary("alice")) // never used for a shared server
	f.activate("alice")
	if names := f.names("alice"); hasPrefix(names, "team") {
		t.Errorf("a shared server is on before alice switched it on: %q", names)
	}
	f.setToggles("alice", `{"team": true, "teamcli": true}`) // opt-in: she read the warning
	f.activate("alice")
	f.activate("bob")
	if got := f.mustCall("alice", "team/whoami", `{}`).Text(); got != "Bearer "+operatorTok {
		t.Errorf("alice on the shared server sent %q, want the operator's token", got)
	}
	var out struct{ Token string }
	_ = json.Unmarshal(f.mustCall("alice", "teamcli/whoami", `{}`).StructuredContent, &out)
	if out.Token != operatorCLI {
		t.Errorf("the shared stdio server got token %q, want the operator's", out.Token)
	}
	if names := f.names("bob"); hasPrefix(names, "team") {
		t.Errorf("bob, not on the allowlist, has %q", names)
	}
	if _, err := f.call("bob", "team/whoami", `{}`); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("bob's call to the shared server: %v; want ErrNotFound", err)
	}
	if spec, err := f.x.StartService(ctx(t), "teamcli#1", "bob"); err != nil || spec != nil {
		t.Errorf("StartService of a shared server for bob: %+v %v; want none", spec, err)
	}

	// An unidentified caller is refused before any credential is read.
	before := counter.reads.Load()
	if _, err := f.call("", "team/whoami", `{}`); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("unidentified call: %v", err)
	}
	if _, err := f.x.StartService(ctx(t), "teamcli#1", ""); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("unidentified StartService: %v", err)
	}
	if n := counter.reads.Load() - before; n != 0 {
		t.Errorf("%d secret reads for an unidentified caller", n)
	}

	// Alice switches it off: refused.
	f.setToggles("alice", `{"team": false}`)
	f.activate("alice")
	if res, err := f.call("alice", "team/whoami", `{}`); err != nil || res.Text() != `MCP server "team" is disabled` {
		t.Errorf("call after switching off: %v %q", err, res.Text())
	}
	if spec, _ := f.x.StartService(ctx(t), "team#2", "alice"); spec != nil {
		t.Errorf("StartService of a remote server: %+v", spec)
	}

	// The operator takes alice off the list: later calls are refused.
	cfg2 := strings.Replace(cfg, `"users": ["alice"]`, `"users": ["dave"]`, -1)
	if err := f.e.Configure(ctx(t), &ext.ConfigureRequest{Name: "mcp", Config: json.RawMessage(cfg2), Host: counter}); err != nil {
		t.Fatal(err)
	}
	// No new Activate: the new config takes over the active users.
	if names := f.names("alice"); hasPrefix(names, "team") {
		t.Errorf("alice keeps %q after removal from the allowlist", names)
	}
	if _, err := f.call("alice", "teamcli/whoami", `{}`); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("call after removal from the allowlist: %v", err)
	}
	auths, _ := rec.seen()
	for _, a := range auths {
		if a != "Bearer "+operatorTok {
			t.Errorf("the shared server received %q", a)
		}
	}
	if strings.Contains(f.logs.String(), "CANARY-") {
		t.Error("a token in the logs")
	}
}

// TestBearerExample runs the example bearer server (a separate process
// that accepts listed tokens only) behind ext-mcp: each user's calls carry
// that user's token, and a user whose token the server refuses is
// quarantined with a reason that does not hold the token.
func TestBearerExample(t *testing.T) {
	needBins(t)
	t.Parallel()
	alice, bob := canary("alice"), canary("bob")
	cmd := exec.Command(bins.bearer, "-addr", "127.0.0.1:0", "-tokens", alice)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	url := strings.TrimSpace(strings.TrimPrefix(line, "bearer: serving "))
	f := newFixture(t, "grpc-fd", fmt.Sprintf(`{"mcpServers": {"b": {"url": %q, "timeout": "5s"}}}`, url), nil)
	f.setSecret("alice", extmcp.TokenSecret("b"), alice)
	f.setSecret("bob", extmcp.TokenSecret("b"), bob)
	f.activate("alice")
	f.activate("bob")
	var who struct{ User, Token string }
	_ = json.Unmarshal(f.mustCall("alice", "b/whoami", `{}`).StructuredContent, &who)
	sum := sha256.Sum256([]byte(alice))
	if who.User != hex.EncodeToString(sum[:6]) || who.Token != "" {
		t.Errorf("whoami for alice: %+v", who)
	}
	st := f.statusOf("bob", "b")
	if st.State != "quarantined" || strings.Contains(st.Reason, bob) || strings.Contains(st.Reason, "CANARY") {
		t.Errorf("bob's status: %+v; want quarantined without his token", st)
	}
	if strings.Contains(f.logs.String(), "CANARY-") {
		t.Error("a token in the logs")
	}
}

// TestSharedServerOutput: a shared server's process that prints the
// operator's token on stderr and exits shows its users the plain sentence
// alone; the operator's status (every user's) shows what it wrote with
// the token redacted; with showOutputToUsers its users see that too.
func TestSharedServerOutput(t *testing.T) {
	t.Parallel()
	tok := canary("OPERATOR")
	for _, show := range []bool{false, true} {
		extra := `"credentials": "shared", "users": ["alice"]`
		if show {
			extra += `, "showOutputToUsers": true`
		}
		f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"db": %s}}`, selfServer("leak", extra)), &extmcp.Options{
			Catalog: &catalog.Options{Backoff: catalog.Backoff{Min: time.Minute, Max: time.Minute}}})
		f.setSecret(extmcp.OperatorUser, extmcp.TokenSecret("db"), tok)
		f.setToggles("alice", `{"db": true}`)
		f.activate("alice")
		st := f.statusOf("alice", "db")
		want := "it exited with status 1 before answering (what it wrote is shown to the operator only)"
		if show {
			want = "it exited with status 1 before answering: auth failed for [redacted]"
		}
		if st.State != "quarantined" || !strings.Contains(st.Reason, want) {
			t.Errorf("show %v: alice's status %+v, want %q", show, st, want)
		}
		res, err := f.call("alice", "db/x", `{}`)
		if err != nil || strings.Contains(res.Text(), tok) || strings.Contains(res.Text(), "auth failed") != show {
			t.Errorf("show %v: alice's call: %v %q", show, err, res.Text())
		}
		var op ext.StatusEntry
		for _, e := range f.status("") {
			if e.User == "alice" && e.Name == "db" {
				op = e
			}
		}
		if !strings.Contains(op.Reason, "it exited with status 1 before answering: auth failed for [redacted]") {
			t.Errorf("show %v: the operator's status %+v", show, op)
		}
		if strings.Contains(fmt.Sprint(f.status("alice"), f.status("")), tok) {
			t.Errorf("show %v: the operator's token in a status", show)
		}
	}
}
