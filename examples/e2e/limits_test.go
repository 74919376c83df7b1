package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// limitsConfig: alice and everyone 5 calls a minute; bob and carol 100,000
// (bob loops beside alice; carol's slow calls are refused by the tool's
// concurrency limit only).
var limitsConfig = map[string]any{
	"user":      map[string]any{"perMinute": 5},
	"tools":     map[string]any{"notes/slow": map[string]any{"concurrent": 1}},
	"overrides": map[string]any{"bob": map[string]any{"user": map[string]any{"perMinute": 100000}}, "carol": map[string]any{"user": map[string]any{"perMinute": 100000}}},
}

// rateLimitData is the data of the JSON-RPC error of a refused call.
type rateLimitData struct {
	RetryAfterMs int64  `json:"retryAfterMs"`
	Limit        string `json:"limit"`
	Scope        string `json:"scope"`
	Kind         string `json:"kind"`
	Tool         string `json:"tool"`
}

// refusedByLimit reports whether err is the JSON-RPC error of a call
// refused by a rate limit, and its data.
func refusedByLimit(err error) (*jsonrpc.Error, rateLimitData, bool) {
	var re *jsonrpc.Error
	var d rateLimitData
	if !errors.As(err, &re) || re.Code != -32029 || json.Unmarshal(re.Data, &d) != nil {
		return nil, d, false
	}
	return re, d, true
}

// TestRateLimitsEndToEnd (issue 21): with the real binaries, alice loops
// over her 5 calls a minute on /mcp (both revisions) and is refused at
// once with JSON-RPC error -32029 whose data says when to retry, which
// limit and its scope, while bob's calls, made all along, all succeed;
// `agenthost call` is refused with a message that says when to retry;
// the refusals are in the audit log (refused, "rate limit: …") and in
// /metrics by kind without a user; carol's second concurrent call of the
// slow tool is refused by its concurrency limit while the first finishes.
func TestRateLimitsEndToEnd(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"limits": limitsConfig, "telemetry": map[string]any{"metrics": true}})
	e.startServe()
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol"} {
		tok[u] = strings.TrimSpace(e.must("", "token", "create", "--user", u, "--name", "agent"))
	}
	op := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A client may write into the params (go-sdk puts the revision in
	// _meta on 2026-07-28): each call gets its own.
	echo := func() *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "notes__echo", Arguments: map[string]any{"text": "hi"}}
	}

	bob, err := connect(t, e.url, tok["bob"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.cs.CallTool(ctx, echo()); err != nil {
		t.Fatal(err)
	}
	// bob calls all along alice's loop.
	stop := make(chan struct{})
	var bobCalls, bobFailed int
	var bobErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := bob.cs.CallTool(ctx, echo())
			bobCalls++
			if err != nil || res.IsError {
				bobFailed++
				bobErr = err
			}
		}
	}()

	aliceOK := 0
	var refusals []rateLimitData
	for _, version := range []string{"2025-11-25", ""} { // go-sdk's choice (2026-07-28), and a session
		alice, err := connectWith(t, e.url, tok["alice"], nil, version)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			res, err := alice.cs.CallTool(ctx, echo())
			if err == nil && !res.IsError {
				aliceOK++
				continue
			}
			re, d, ok := refusedByLimit(err)
			if !ok {
				t.Fatalf("alice's call failed otherwise (%q, after %d admitted): %v %+v", version, aliceOK, err, res)
			}
			if !strings.Contains(re.Message, "rate limit: at most 5 calls per minute of yours; try again in") {
				t.Errorf("the error's message: %q", re.Message)
			}
			refusals = append(refusals, d)
		}
	}
	close(stop)
	wg.Wait()
	if aliceOK != 5 || len(refusals) != 15 {
		t.Errorf("alice: %d calls admitted, %d refused; want 5 and 15", aliceOK, len(refusals))
	}
	for _, d := range refusals {
		if d.Scope != "user" || d.Kind != "rate" || d.Limit != "5 calls per minute" || d.RetryAfterMs <= 0 || d.RetryAfterMs > 12000 {
			t.Errorf("refusal data %+v", d)
			break
		}
	}
	if bobCalls == 0 || bobFailed != 0 {
		t.Errorf("bob, calling during alice's loop: %d calls, %d failed (%v)", bobCalls, bobFailed, bobErr)
	}

	// The CLI says when to retry.
	out, errOut, code := e.run("", "call", "--user", "alice", "notes/echo", `{"text":"cli"}`)
	if code == 0 || !strings.Contains(errOut, "rate limit: at most 5 calls per minute of yours; try again in") {
		t.Errorf("agenthost call over the limit: exit %d\n%s\n%s", code, out, errOut)
	}

	// carol: the slow tool's concurrency limit.
	carol, err := connectWith(t, e.url, tok["carol"], nil, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	startFirst := func() {
		go func() {
			res, err := carol.cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__slow", Arguments: map[string]any{"duration": "2s"}})
			if err == nil && (res.IsError || len(res.Content) == 0) {
				err = errors.New("the slow call failed")
			} else if err == nil {
				if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "slept 2s" {
					err = errors.New("the slow call answered otherwise")
				}
			}
			first <- err
		}()
	}
	startFirst()
	var conc rateLimitData
	for i := 0; conc.Kind == ""; i++ {
		if i == 500 {
			t.Fatal("500 calls of notes/slow ran beside a call of it in flight: no concurrency limit")
		}
		select {
		case err := <-first:
			// It came while one of the calls below ran, and was refused:
			// start it again.
			if _, _, ok := refusedByLimit(err); !ok {
				t.Fatalf("carol's first slow call: %v", err)
			}
			startFirst()
		default:
		}
		_, err := carol.cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__slow", Arguments: map[string]any{"duration": "0s"}})
		if _, d, ok := refusedByLimit(err); ok {
			conc = d
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if conc.Scope != "tool" || conc.Kind != "concurrency" || conc.Tool != "notes/slow" || conc.Limit != "1 concurrent call" || conc.RetryAfterMs != 1000 {
		t.Errorf("carol's second concurrent call: %+v", conc)
	}
	if err := <-first; err != nil {
		t.Errorf("carol's first slow call, running while the second was refused: %v", err)
	}

	// Audit: refused, with the limit as the reason.
	recs := e.auditLines("--user", "alice", "--outcome", "refused")
	if len(recs) != 16 {
		t.Errorf("alice's refused records: %d, want 16 (15 on /mcp, 1 by the CLI)", len(recs))
	}
	for _, r := range recs {
		if r.Tool != "notes/echo" || r.ToolHash == "" || !strings.HasPrefix(r.Reason, "rate limit: at most 5 calls per minute") {
			t.Errorf("record %+v", r)
			break
		}
	}
	if recs := e.auditLines("--user", "bob", "--outcome", "refused"); len(recs) != 0 {
		t.Errorf("bob has refused records: %+v", recs)
	}

	// Metrics: by kind, never a user.
	code, body := e.api("GET", "/metrics", op, "")
	if code != 200 || !strings.Contains(body, `agenthost_calls_rate_limited_total{agenthost_limit="user_rate"} 16`) ||
		!strings.Contains(body, `agenthost_calls_rate_limited_total{agenthost_limit="tool_concurrency"} `) {
		t.Errorf("/metrics: HTTP %d, no rate limit counters:\n%s", code, grepLines(body, "rate_limited"))
	}
	if strings.Contains(grepLines(body, "rate_limited"), "alice") {
		t.Error("/metrics names a user")
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRateLimitsUnderConcurrentCalls (issue 21): the limits hold when the
// calls arrive together, from outside the process, over several
// connections and both revisions: of 40 calls fired at once by dave
// (5 a minute) exactly 5 run and 35 are refused with -32029; of 8
// concurrent calls of the slow tool (1 at a time) by erin exactly one
// runs and 7 are refused at once, naming the tool's concurrency limit.
func TestRateLimitsUnderConcurrentCalls(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"limits": map[string]any{
			"user":      map[string]any{"perMinute": 5},
			"tools":     map[string]any{"notes/slow": map[string]any{"concurrent": 1}},
			"overrides": map[string]any{"erin": map[string]any{"user": map[string]any{"perMinute": 100000}}},
		}})
	e.startServe()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// fire makes n calls per client at once (each goroutine waits for the
	// start) and returns how many ran and the refusals' data.
	fire := func(user string, n int, params func() *mcp.CallToolParams, callCtx context.Context) (int, []rateLimitData, []error) {
		t.Helper()
		tok := strings.TrimSpace(e.must("", "token", "create", "--user", user, "--name", "burst"))
		var clients []*client
		for _, version := range []string{"2025-11-25", "", "2025-11-25", ""} {
			c, err := connectWith(t, e.url, tok, nil, version)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		var mu sync.Mutex
		var ran int
		var refused []rateLimitData
		var other []error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range clients {
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := c.cs.CallTool(callCtx, params())
					mu.Lock()
					defer mu.Unlock()
					if _, d, ok := refusedByLimit(err); ok {
						refused = append(refused, d)
					} else if err == nil && !res.IsError {
						ran++
					} else {
						other = append(other, err)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		return ran, refused, other
	}

	ran, refused, other := fire("dave", 10, func() *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "notes__echo", Arguments: map[string]any{"text": "hi"}}
	}, ctx)
	if ran != 5 || len(refused) != 35 || len(other) != 0 {
		t.Errorf("dave's 40 calls at once: %d ran, %d refused, other errors %v; want 5 and 35", ran, len(refused), other)
	}
	for _, d := range refused {
		if d.Scope != "user" || d.RetryAfterMs <= 0 {
			t.Errorf("a refusal of dave's: %+v", d)
			break
		}
	}

	// erin: the admitted slow call sleeps a minute; the other seven are
	// refused at once, then the admitted one is cancelled.
	slowCtx, stopSlow := context.WithCancel(ctx)
	var ranSlow int
	var refusedSlow []rateLimitData
	done := make(chan struct{})
	go func() {
		defer close(done)
		ranSlow, refusedSlow, _ = fire("erin", 2, func() *mcp.CallToolParams {
			return &mcp.CallToolParams{Name: "notes__slow", Arguments: map[string]any{"duration": "1m"}}
		}, slowCtx)
	}()
	// The seven refusals arrive while the admitted call sleeps: then it
	// is cancelled, and fire returns.
	eventually(t, "seven of erin's eight slow calls refused", func() bool {
		out := e.must("", "audit", "--user", "erin", "--json")
		return strings.Count(out, "rate limit") >= 7
	})
	stopSlow()
	<-done
	if ranSlow != 0 || len(refusedSlow) != 7 {
		t.Errorf("erin's 8 concurrent slow calls: %d ran to the end, %d refused; want 0 (the one admitted was cancelled) and 7", ranSlow, len(refusedSlow))
	}
	for _, d := range refusedSlow {
		if d.Kind != "concurrency" || d.Tool != "notes/slow" {
			t.Errorf("a refusal of erin's: %+v", d)
			break
		}
	}
}
