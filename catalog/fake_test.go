package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is one server's behaviour, shared by every connection to it.
// Its fields are changed by tests through its methods.
type fakeServer struct {
	mu           sync.Mutex
	tools        []catalog.ToolInfo
	connectErr   error
	listErr      error
	connectDelay time.Duration
	listDelay    time.Duration
	hang         bool          // Connect blocks until its ctx ends
	listGate     chan struct{} // when set, ListTools waits for it
	slowGate     chan struct{} // the "slow" tool waits for it
	slowStarted  chan struct{} // receives one value per slow call started
	connects     int
	lists        int
	conns        []*fakeConn
}

func newServer(tools ...string) *fakeServer {
	s := &fakeServer{slowStarted: make(chan struct{}, 64)}
	for _, t := range tools {
		s.tools = append(s.tools, catalog.ToolInfo{Name: t, Description: "the " + t + " tool",
			InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)})
	}
	return s
}

func (s *fakeServer) set(f func(s *fakeServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *fakeServer) counts() (connects, lists int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects, s.lists
}

// live returns the connections not closed yet.
func (s *fakeServer) live() []*fakeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*fakeConn
	for _, c := range s.conns {
		if !c.isClosed() {
			out = append(out, c)
		}
	}
	return out
}

func (s *fakeServer) last() *fakeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 0 {
		return nil
	}
	return s.conns[len(s.conns)-1]
}

// fakeConnector connects to fake servers by (user, server) or by server.
type fakeConnector struct {
	mu      sync.Mutex
	servers map[string]*fakeServer // "user/server" overrides "server"
}

func newConnector() *fakeConnector { return &fakeConnector{servers: map[string]*fakeServer{}} }

func (f *fakeConnector) add(key string, s *fakeServer) *fakeServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers[key] = s
	return s
}

func (f *fakeConnector) lookup(user, server string) *fakeServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.servers[user+"/"+server]; s != nil {
		return s
	}
	return f.servers[server]
}

func (f *fakeConnector) Connect(ctx context.Context, user string, d catalog.ServerDecl, onChanged func()) (catalog.Conn, error) {
	s := f.lookup(user, d.Name)
	if s == nil {
		return nil, fmt.Errorf("no such server %q", d.Name)
	}
	s.mu.Lock()
	s.connects++
	delay, hang, err := s.connectDelay, s.hang, s.connectErr
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	c := &fakeConn{srv: s, user: user, decl: d, onChanged: onChanged, done: make(chan struct{}), closedCh: make(chan struct{})}
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return c, nil
}

// fakeConn is one connection to a fake server.
type fakeConn struct {
	srv       *fakeServer
	user      string
	decl      catalog.ServerDecl
	onChanged func()
	done      chan struct{}
	closedCh  chan struct{}

	mu       sync.Mutex
	err      error
	closed   int
	inflight int
	ended    bool // done was closed
}

func (c *fakeConn) ListTools(ctx context.Context) ([]catalog.ToolInfo, error) {
	s := c.srv
	s.mu.Lock()
	s.lists++
	gate, delay, err := s.listGate, s.listDelay, s.listErr
	tools := slices.Clone(s.tools)
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return tools, nil
}

func (c *fakeConn) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	user, tool, args := req.User, req.Name, req.Arguments
	c.mu.Lock()
	if c.closed > 0 {
		c.mu.Unlock()
		return nil, errors.New("call on a closed connection")
	}
	c.inflight++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inflight--
		c.mu.Unlock()
	}()
	if user != c.user {
		return nil, fmt.Errorf("connection of %q used for %q", c.user, user)
	}
	switch tool {
	case "slow":
		c.srv.mu.Lock()
		gate := c.srv.slowGate
		c.srv.mu.Unlock()
		c.srv.slowStarted <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, errors.New("connection closed")
		}
		return ext.TextResult("slow done for " + user), nil
	case "ticks":
		// Reports progress every 100ms, ten times, then answers.
		for i := range 10 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if err := ext.Progress(ctx, req.Session, float64(i+1), 10, ""); err != nil {
				return nil, err
			}
		}
		return ext.TextResult("ticked"), nil
	case "fail":
		return ext.ErrorResult("the tool failed"), nil
	case "broken":
		return nil, errors.New("protocol error -32603")
	}
	return &ext.CallToolResult{
		Content:           json.RawMessage(fmt.Sprintf(`[{"type":"text","text":%q}]`, user+"@"+c.decl.Name+":"+tool)),
		StructuredContent: args,
	}, nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

func (c *fakeConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// crash ends the connection as if the server died.
func (c *fakeConn) crash(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.err, c.ended = err, true
	close(c.done)
}

func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed++
	if c.closed == 1 {
		close(c.closedCh)
	}
	if !c.ended {
		c.ended = true
		c.err = nil
		close(c.done)
	}
	return nil
}

func (c *fakeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed > 0
}

func (c *fakeConn) closeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// fakePublisher records each user's published lists.
type fakePublisher struct {
	mu      sync.Mutex
	last    map[string][]ext.Tool
	count   map[string]int
	err     error
	changed chan struct{}
}

func newPublisher() *fakePublisher {
	return &fakePublisher{last: map[string][]ext.Tool{}, count: map[string]int{}, changed: make(chan struct{})}
}

func (p *fakePublisher) Publish(_ context.Context, user string, c *ext.Catalog) error {
	var tools []ext.Tool
	if c != nil {
		tools = c.Tools
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.last[user] = slices.Clone(tools)
	p.count[user]++
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// names returns the user's last published tool names.
func (p *fakePublisher) names(user string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, t := range p.last[user] {
		out = append(out, t.Name)
	}
	return out
}

func (p *fakePublisher) tools(user string) []ext.Tool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.last[user])
}

func (p *fakePublisher) publishes(user string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[user]
}

// waitNames waits until the user's published names equal want.
func (p *fakePublisher) waitNames(t *testing.T, user string, want ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		ch := p.changed
		var got []string
		for _, tool := range p.last[user] {
			got = append(got, tool.Name)
		}
		p.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("published tools of %q: got %q, want %q", user, got, want)
		}
	}
}

// plans is a mutable Planner: each user's plan is a list of declarations.
type plans struct {
	mu    sync.Mutex
	by    map[string][]catalog.ServerDecl
	extra map[string][]catalog.Problem
	calls map[string]int
	err   error
}

func newPlans() *plans {
	return &plans{by: map[string][]catalog.ServerDecl{}, extra: map[string][]catalog.Problem{}, calls: map[string]int{}}
}

func (p *plans) set(user string, decls ...catalog.ServerDecl) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.by[user] = decls
}

func (p *plans) Plan(_ context.Context, user string) (catalog.Plan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[user]++
	if p.err != nil {
		return catalog.Plan{}, p.err
	}
	return catalog.Plan{Servers: slices.Clone(p.by[user]), Problems: slices.Clone(p.extra[user])}, nil
}

func decl(name string) catalog.ServerDecl {
	return catalog.ServerDecl{Name: name, Enabled: true, Fingerprint: "v1"}
}

// rig is an engine with fakes.
type rig struct {
	e    *catalog.Engine
	conn *fakeConnector
	pub  *fakePublisher
	plan *plans
}

func newRig(t testing.TB, opts *catalog.Options) *rig {
	t.Helper()
	r := &rig{conn: newConnector(), pub: newPublisher(), plan: newPlans()}
	r.e = catalog.New(r.plan, r.conn, r.pub, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.e.Close(ctx)
	})
	return r
}

func call(t testing.TB, e *catalog.Engine, user, name string) (*ext.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.Call(ctx, &ext.CallToolRequest{User: user, Name: name, Arguments: json.RawMessage(`{"x":1}`)})
}

func mustActivate(t testing.TB, e *catalog.Engine, user string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Activate(ctx, user); err != nil {
		t.Fatalf("Activate(%q): %v", user, err)
	}
}

// statusOf returns the user's status entry for server, or a zero entry.
func statusOf(e *catalog.Engine, user, server string) ext.StatusEntry {
	for _, s := range e.Status(user) {
		if s.Name == server {
			return s
		}
	}
	return ext.StatusEntry{}
}

// waitClosed waits until the engine closed c.
func waitClosed(t testing.TB, c *fakeConn) {
	t.Helper()
	select {
	case <-c.closedCh:
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection of %q to %q was not closed", c.user, c.decl.Name)
	}
}
