package catalog

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/termsafe"
)

// connState is where a connection is in its life.
type connState int

const (
	stateActive   connState = iota // serving calls
	stateRetiring                  // draining: running calls finish, new ones are refused
	stateClosing                   // Close started or done; gone for good
)

// conn is one connection and the engine's view of it.
type conn struct {
	e           *Engine
	u           *user
	name        string
	fingerprint string
	c           Conn

	// Guarded by u.mu.
	decl     ServerDecl
	tools    []ToolInfo
	index    map[string]struct{} // registered (visible) tool names
	built    []ext.Tool
	refused  []string            // tool names refused for their control characters, escaped
	extras   *Extras             // prompts, resources, templates, instructions
	prompts  map[string]struct{} // the server's prompt names
	uris     map[string]struct{} // the server's resource URIs
	state    connState
	inflight int
	dead     bool // ended on its own: never revived

	stop      chan struct{} // closed when the engine starts closing c
	closed    chan struct{} // closed once c.Close returned
	closeOnce sync.Once

	rmu        sync.Mutex // guards the re-list fields
	registered bool
	relisting  bool
	pending    bool
	lastRelist time.Time
}

// connectResult is the outcome of connecting one server.
type connectResult struct {
	decl      ServerDecl
	c         *conn
	reason    string // why it failed, for the user
	opReason  string // reason with details for the operator only, or ""
	signIn    bool   // it failed for want of a sign-in (reason says how)
	cancelled bool   // it failed because the refresh was cancelled
	busy      bool   // it failed for want of a resource of the host (ext.ErrBusy)
}

// connectAll connects the servers in parallel and returns when every
// attempt has ended.
func (e *Engine) connectAll(ctx context.Context, u *user, decls []ServerDecl) []connectResult {
	results := make([]connectResult, len(decls))
	if len(decls) == 0 {
		return results
	}
	var g errgroup.Group
	g.SetLimit(e.opts.MaxParallelConnects)
	for i, d := range decls {
		g.Go(func() error {
			results[i] = e.connect(ctx, u, d)
			return nil
		})
	}
	_ = g.Wait() // every attempt reports in its result
	return results
}

// connect makes one connection and lists its tools.
func (e *Engine) connect(ctx context.Context, u *user, d ServerDecl) connectResult {
	c := &conn{e: e, u: u, name: d.Name, fingerprint: d.Fingerprint, decl: d,
		stop: make(chan struct{}), closed: make(chan struct{})}
	cctx, cancel := context.WithTimeout(ctx, e.opts.ConnectTimeout)
	defer cancel()
	stop := context.AfterFunc(e.ctx, cancel)
	defer stop()
	fail := func(what string, err error) connectResult {
		r := connectResult{decl: d}
		var sie *SignInError
		switch {
		case errors.As(err, &sie):
			r.reason, r.signIn = sie.Reason, true
		case ctx.Err() != nil || e.ctx.Err() != nil:
			r.cancelled = true
		case errors.Is(cctx.Err(), context.DeadlineExceeded):
			r.reason = fmt.Sprintf("%s timed out after %v", what, e.opts.ConnectTimeout)
		default:
			r.reason = fmt.Sprintf("%s failed: %v", what, err)
			r.opReason = operatorReason(what+" failed: ", err)
			r.busy = errors.Is(err, ext.ErrBusy)
		}
		return r
	}
	cn, err := e.connector.Connect(cctx, u.id, d, c.toolsChanged)
	if err != nil {
		return fail("connecting", err)
	}
	if cn == nil {
		return connectResult{decl: d, reason: "connecting failed: the connector returned no connection"}
	}
	infos, err := cn.ListTools(cctx)
	if err != nil {
		_ = cn.Close()
		return fail("listing its tools", err)
	}
	c.extras = e.listExtras(cctx, u.id, d.Name, cn)
	c.c = cn
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		_ = cn.Close()
		return connectResult{decl: d, cancelled: true}
	}
	e.live[c] = struct{}{}
	e.mu.Unlock()
	c.tools = infos
	c.rebuildLocked() // c is not shared yet
	return connectResult{decl: d, c: c}
}

// startConn starts watching a registered connection and runs a re-list
// that was asked for while it was being made.
func (e *Engine) startConn(c *conn) {
	if !e.spawn(c.watch) {
		return
	}
	c.rmu.Lock()
	c.registered = true
	pending := c.pending
	c.pending = false
	c.rmu.Unlock()
	if pending {
		c.toolsChanged()
	}
}

// watch waits for the connection to die or be closed by the engine.
func (c *conn) watch() {
	select {
	case <-c.c.Done():
		c.e.connDied(c)
	case <-c.stop:
	}
}

// connDied handles a connection that ended on its own: it is quarantined
// for its user and retried with backoff.
func (e *Engine) connDied(c *conn) {
	u := c.u
	if err := u.lock.lock(e.ctx); err != nil {
		return // Close takes over
	}
	defer u.lock.unlock()
	reason, opReason := "the connection ended", ""
	if err := c.c.Err(); err != nil {
		reason = "the connection ended: " + err.Error()
		opReason = operatorReason("the connection ended: ", err)
	}
	var toClose []*conn
	u.mu.Lock()
	c.dead = true
	switch c.state {
	case stateClosing:
		u.mu.Unlock()
		return
	case stateActive:
		toClose = u.retireLocked(c)
		if !u.gone {
			q := u.quarantine[c.name]
			if q == nil || q.fingerprint != c.fingerprint {
				q = &quarantine{fingerprint: c.fingerprint}
				u.quarantine[c.name] = q
			}
			q.failures++
			q.reason, q.opReason, q.busy = reason, opReason, false
			q.next = time.Now().Add(e.opts.Backoff.delay(q.failures))
			delete(u.disabled, c.name)
			e.repeats.Warn("catalog: connection died; server quarantined", u.id, c.name, cmp.Or(opReason, reason), "retry", q.next)
		}
	case stateRetiring:
		// Running calls fail on their own; the last one closes it.
	}
	gone := u.gone
	cat := u.catalogLocked()
	u.mu.Unlock()
	e.closeConns(toClose)
	if gone {
		return
	}
	e.scheduleRetry(u)
	_ = e.publish(e.ctx, u, cat)
}

// retireLocked takes c out of service. It returns c when c must be closed
// now (no call is running); otherwise the last running call closes it.
// u.mu must be held.
func (u *user) retireLocked(c *conn) []*conn {
	if c.state != stateActive {
		return nil
	}
	if u.conns[c.name] == c {
		delete(u.conns, c.name)
	}
	if c.inflight == 0 {
		c.state = stateClosing
		return []*conn{c}
	}
	c.state = stateRetiring
	u.retiring[c] = struct{}{}
	return nil
}

// revivableLocked returns a draining connection to name with the given
// fingerprint, if one is left. u.mu must be held.
func (u *user) revivableLocked(name, fingerprint string) *conn {
	for c := range u.retiring {
		if c.name == name && c.fingerprint == fingerprint && c.state == stateRetiring && !c.dead {
			return c
		}
	}
	return nil
}

// closeConns closes connections on engine-owned goroutines.
func (e *Engine) closeConns(cs []*conn) {
	for _, c := range cs {
		if !e.spawn(c.close) {
			c.close()
		}
	}
}

// close closes the connection; it runs once per conn, after its state
// became stateClosing.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.stop)
		if err := c.c.Close(); err != nil {
			c.e.log.Debug("catalog: closing a connection", "user", c.u.id, "server", c.name, "error", err)
		}
		c.e.mu.Lock()
		delete(c.e.live, c)
		if len(c.e.live) == 0 {
			c.e.live = map[*conn]struct{}{} // maps never shrink: let the old one go
		}
		c.e.mu.Unlock()
		close(c.closed)
	})
}

// rebuildLocked recomputes c's registered tools from its list and policy.
// u.mu must be held (or c not yet shared).
func (c *conn) rebuildLocked() {
	c.index = make(map[string]struct{}, len(c.tools))
	built := make([]ext.Tool, 0, len(c.tools))
	seen := make(map[string]bool, len(c.tools))
	c.refused = nil
	for _, t := range c.tools {
		if t.Name == "" || seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		if termsafe.HasUnsafe(t.Name) {
			// A name is shown raw by clients and terminals: one with
			// control characters (an escape sequence, a forged line) is
			// refused; the status names it, escaped.
			c.refused = append(c.refused, termsafe.String(t.Name))
			continue
		}
		exp, hidden := c.decl.Tools.Resolve(t.Name)
		if hidden {
			continue
		}
		c.index[t.Name] = struct{}{}
		desc := t.Description
		if strings.TrimSpace(desc) == "" {
			desc = fmt.Sprintf("MCP tool %s on server %s.", t.Name, c.name)
		}
		built = append(built, ext.Tool{
			Name:          c.name + "/" + t.Name,
			Title:         t.Title,
			Description:   desc,
			InputSchema:   schemaOrDefault(t.InputSchema),
			OutputSchema:  nonNull(t.OutputSchema),
			Annotations:   nonNull(t.Annotations),
			Execution:     nonNull(t.Execution),
			Icons:         nonNull(t.Icons),
			Meta:          nonNull(t.Meta),
			Exposure:      exp,
			Pin:           c.decl.Pin,
			PinByOperator: c.decl.PinByOperator,
		})
	}
	c.built = built
	c.prompts, c.uris = map[string]struct{}{}, map[string]struct{}{}
	if c.extras != nil {
		for _, p := range c.extras.Prompts {
			c.prompts[p.Name] = struct{}{}
		}
		for _, r := range c.extras.Resources {
			c.uris[r.Name] = struct{}{}
		}
	}
}

var defaultSchema = json.RawMessage(`{"type":"object"}`)

func schemaOrDefault(s json.RawMessage) json.RawMessage {
	if s = nonNull(s); s == nil {
		return defaultSchema
	}
	return s
}

// nonNull returns nil for an empty or JSON null document.
func nonNull(s json.RawMessage) json.RawMessage {
	t := strings.TrimSpace(string(s))
	if t == "" || t == "null" {
		return nil
	}
	return s
}

// toolsChanged is the connection's onToolsChanged: it re-lists the server
// and republishes, with at most one re-list running and one queued.
func (c *conn) toolsChanged() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if !c.registered || c.relisting {
		c.pending = true
		return
	}
	c.relisting = true
	if !c.e.spawn(c.relistLoop) {
		c.relisting = false
	}
}

// relistLoop re-lists until no change is pending.
func (c *conn) relistLoop() {
	e := c.e
	for {
		c.rmu.Lock()
		last := c.lastRelist
		c.rmu.Unlock()
		if wait := time.Until(last.Add(e.opts.RelistInterval)); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.stop:
			case <-e.ctx.Done():
			}
			t.Stop()
		}
		if e.ctx.Err() == nil && !isClosed(c.stop) {
			c.relist()
		}
		c.rmu.Lock()
		c.lastRelist = time.Now()
		if !c.pending || e.ctx.Err() != nil || isClosed(c.stop) {
			c.relisting = false
			c.pending = false
			c.rmu.Unlock()
			return
		}
		c.pending = false
		c.rmu.Unlock()
	}
}

// relist lists c's tools and, if c is still the user's connection to its
// server, republishes the user's tools.
func (c *conn) relist() {
	e, u := c.e, c.u
	ctx, cancel := context.WithTimeout(e.ctx, e.opts.ConnectTimeout)
	defer cancel()
	infos, err := c.c.ListTools(ctx)
	if err != nil {
		// A dead connection is handled by its watcher; otherwise keep the
		// last list.
		e.log.Warn("catalog: re-listing tools failed", "user", u.id, "server", c.name, "error", err)
		return
	}
	extras := e.listExtras(ctx, u.id, c.name, c.c)
	if err := u.lock.lock(e.ctx); err != nil {
		return
	}
	defer u.lock.unlock()
	u.mu.Lock()
	c.tools = infos
	c.extras = extras
	c.rebuildLocked()
	current := c.state == stateActive && u.conns[c.name] == c && !u.gone
	cat := u.catalogLocked()
	u.mu.Unlock()
	if current {
		_ = e.publish(e.ctx, u, cat)
	}
}

// listExtras lists what a server offers beside tools. A server that fails
// to list them keeps its tools: the failure is logged and it offers none.
func (e *Engine) listExtras(ctx context.Context, user, server string, cn Conn) *Extras {
	fc, ok := cn.(FeatureConn)
	if !ok {
		return nil
	}
	x, err := fc.ListExtras(ctx)
	if err != nil {
		e.log.Warn("catalog: listing prompts and resources failed", "user", user, "server", server, "error", err)
		return nil
	}
	return x
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
