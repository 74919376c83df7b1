package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/repeatlog"
)

// Options configures an [Engine]. The zero value (or nil) gives the
// defaults documented on each field.
type Options struct {
	// ConnectTimeout bounds connecting to a server and listing its tools
	// (default 30s), and each re-list.
	ConnectTimeout time.Duration
	// DefaultCallTimeout bounds a call to a server whose declaration sets
	// no Timeout (default 60s).
	DefaultCallTimeout time.Duration
	// Backoff spaces the retries of a quarantined server.
	Backoff Backoff
	// RelistInterval is the least time between the end of one re-list of a
	// server (after tools/list_changed) and the start of the next (default
	// 1s). A server that announces a change after every list is thus
	// listed at most once per interval.
	RelistInterval time.Duration
	// MaxParallelConnects bounds the connections one refresh opens at once
	// (default 16).
	MaxParallelConnects int
	// Logger receives the engine's logs (default: discarded). Logs name
	// users and servers, never secrets.
	Logger *slog.Logger
	// RepeatWindow collapses the warnings of quarantined servers (default
	// 1 min): the first of a server and reason is logged at once, the
	// same again within the window, for any user, only counted, and one
	// line at the window's end gives the count and the users.
	RepeatWindow time.Duration
	_            struct{}
}

// Backoff is an exponential backoff with jitter: the n-th retry waits a
// random time between half and all of min(Max, Min·2ⁿ⁻¹).
type Backoff struct {
	// Min is the first wait (default 1s).
	Min time.Duration
	// Max caps the wait (default 5m).
	Max time.Duration
}

// delay returns the wait before retry number n (n ≥ 1).
func (b Backoff) delay(n int) time.Duration {
	d := b.Min
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	half := d / 2
	return half + rand.N(d-half+1)
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.ConnectTimeout <= 0 {
		out.ConnectTimeout = 30 * time.Second
	}
	if out.DefaultCallTimeout <= 0 {
		out.DefaultCallTimeout = 60 * time.Second
	}
	if out.Backoff.Min <= 0 {
		out.Backoff.Min = time.Second
	}
	if out.Backoff.Max < out.Backoff.Min {
		out.Backoff.Max = max(5*time.Minute, out.Backoff.Min)
	}
	if out.RelistInterval <= 0 {
		out.RelistInterval = time.Second
	}
	if out.MaxParallelConnects <= 0 {
		out.MaxParallelConnects = 16
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.RepeatWindow <= 0 {
		out.RepeatWindow = time.Minute
	}
	return out
}

// Engine is the per-user catalog: it keeps each active user connected to
// the servers their [Plan] names, publishes their tools and routes their
// calls. See the package documentation for the rules it follows.
//
// All methods are safe for concurrent use.
type Engine struct {
	planner   Planner
	connector Connector
	pub       Publisher
	opts      Options
	log       *slog.Logger
	repeats   *repeatlog.Log // the quarantine warnings, collapsed

	// ctx ends when Close starts; it bounds all background work.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	users   map[string]*user
	live    map[*conn]struct{} // every connection made and not yet closed
	closing bool
	noSpawn bool
	wg      sync.WaitGroup // every goroutine and pending timer the engine owns

	closeOnce sync.Once
	closeErr  error
}

// New returns an engine that plans with p, connects with c and publishes
// with pub. opts may be nil. New starts nothing: users are activated on
// demand.
func New(p Planner, c Connector, pub Publisher, opts *Options) *Engine {
	o := opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Engine{
		planner: p, connector: c, pub: pub, opts: o, log: o.Logger, repeats: repeatlog.New(o.Logger, o.RepeatWindow),
		ctx: ctx, cancel: cancel,
		users: map[string]*user{}, live: map[*conn]struct{}{},
	}
}

// errClosed is returned by work asked of a closed engine.
var errClosed = fmt.Errorf("catalog: engine closed: %w", ext.ErrUnavailable)

// userState names the user type where a parameter called user hides it.
type userState = user

// errGone marks a user deactivated while a caller waited for it.
var errGone = errors.New("catalog: user deactivated")

// user is one user's catalog.
type user struct {
	id string
	// lock serializes everything that changes the user's set: refreshes,
	// retirements, re-list commits and crash handling, in arrival order.
	lock fifoLock

	mu         sync.Mutex         // guards the fields below; never held across I/O
	conns      map[string]*conn   // active connections by server
	retiring   map[*conn]struct{} // draining connections
	quarantine map[string]*quarantine
	disabled   map[string]bool // retired servers: calls get the disabled result
	problems   []Problem
	retry      *time.Timer
	gone       bool
}

// quarantine is a server that failed for one user.
type quarantine struct {
	fingerprint string
	reason      string
	// opReason is reason with details only the operator sees
	// ([OperatorOnlyError]), or "".
	opReason string
	failures int
	next     time.Time
	// signIn parks the server until its fingerprint changes: it waits
	// for the user to sign in, not for a retry.
	signIn bool
	// busy: it failed for want of a resource of the host (ext.ErrBusy),
	// so the next refresh, which the host asks for once one frees, tries
	// it again before its backoff is over.
	busy bool
}

// spawn runs f on a goroutine the engine owns and joins in Close. It
// reports false, without running f, once Close has joined everything.
func (e *Engine) spawn(f func()) bool {
	e.mu.Lock()
	if e.noSpawn {
		e.mu.Unlock()
		return false
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		f()
	}()
	return true
}

func (e *Engine) isClosing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closing
}

// userFor returns the user's catalog, creating it.
func (e *Engine) userFor(id string) (*user, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return nil, errClosed
	}
	u := e.users[id]
	if u == nil {
		u = &user{id: id, conns: map[string]*conn{}, retiring: map[*conn]struct{}{},
			quarantine: map[string]*quarantine{}, disabled: map[string]bool{}}
		e.users[id] = u
	}
	return u, nil
}

// existingUser returns the user's catalog, or nil when the user is not
// active.
func (e *Engine) existingUser(id string) (*user, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return nil, errClosed
	}
	return e.users[id], nil
}

// Activate makes the user's catalog active, or refreshes it when it is:
// it computes the user's active set, retires the connections no longer in
// it, connects the new ones in parallel and publishes the user's whole
// tool list. A server that fails is quarantined and the call still
// succeeds; an error means the set could not be computed or published.
func (e *Engine) Activate(ctx context.Context, user string) error {
	if user == "" {
		return fmt.Errorf("activating: caller not identified: %w", ext.ErrInvalidArgument)
	}
	for {
		u, err := e.userFor(user)
		if err != nil {
			return err
		}
		if err := e.refresh(ctx, u); !errors.Is(err, errGone) {
			return err
		}
	}
}

// Refresh refreshes an active user's catalog as Activate does; for a user
// who is not active it does nothing.
func (e *Engine) Refresh(ctx context.Context, user string) error {
	u, err := e.existingUser(user)
	if err != nil || u == nil {
		return err
	}
	if err := e.refresh(ctx, u); !errors.Is(err, errGone) {
		return err
	}
	return nil
}

// ReconcileAll refreshes every active user, a few at a time, and returns
// their errors joined.
func (e *Engine) ReconcileAll(ctx context.Context) error {
	if e.isClosing() {
		return errClosed
	}
	ids := e.Users()
	errs := make([]error, len(ids))
	var g errgroup.Group
	g.SetLimit(8)
	for i, id := range ids {
		g.Go(func() error {
			if err := e.Refresh(ctx, id); err != nil {
				errs[i] = fmt.Errorf("refreshing %q: %w", id, err)
			}
			return nil
		})
	}
	_ = g.Wait() // each user's error is in errs, in the users' order
	return errors.Join(errs...)
}

// Users returns the active users, sorted.
func (e *Engine) Users() []string {
	e.mu.Lock()
	ids := make([]string, 0, len(e.users))
	for id := range e.users {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// Retire withdraws one server from an active user's catalog: its tools
// are unpublished at once and its connection drains (running calls finish,
// new ones get the disabled result). The next refresh plans the user's set
// afresh and may bring it back.
func (e *Engine) Retire(ctx context.Context, user, server string) error {
	u, err := e.existingUser(user)
	if err != nil || u == nil {
		return err
	}
	if err := u.lock.lock(ctx); err != nil {
		return err
	}
	defer u.lock.unlock()
	u.mu.Lock()
	if u.gone {
		u.mu.Unlock()
		return nil
	}
	var toClose []*conn
	if c := u.conns[server]; c != nil {
		toClose = u.retireLocked(c)
		u.disabled[server] = true
	}
	if _, ok := u.quarantine[server]; ok {
		delete(u.quarantine, server)
		u.disabled[server] = true
	}
	cat := u.catalogLocked()
	u.mu.Unlock()
	e.closeConns(toClose)
	e.scheduleRetry(u)
	return e.publish(ctx, u, cat)
}

// Deactivate retires every server of the user, publishes an empty tool
// list and forgets the user once their running calls have finished.
func (e *Engine) Deactivate(ctx context.Context, user string) error {
	u, err := e.existingUser(user)
	if err != nil || u == nil {
		return err
	}
	if err := u.lock.lock(ctx); err != nil {
		return err
	}
	defer u.lock.unlock()
	u.mu.Lock()
	if u.gone {
		u.mu.Unlock()
		return nil
	}
	u.gone = true
	var toClose []*conn
	for _, c := range u.conns {
		toClose = append(toClose, u.retireLocked(c)...)
	}
	clear(u.quarantine)
	clear(u.disabled)
	u.problems = nil
	e.stopRetryLocked(u)
	u.mu.Unlock()
	e.mu.Lock()
	if e.users[user] == u {
		delete(e.users, user)
		if len(e.users) == 0 {
			e.users = make(map[string]*userState) // maps never shrink: let the old one go
		}
	}
	e.mu.Unlock()
	e.closeConns(toClose)
	return e.publish(ctx, u, nil)
}

// refresh brings u's connections in line with its plan and publishes.
func (e *Engine) refresh(ctx context.Context, u *user) error {
	if err := u.lock.lock(ctx); err != nil {
		return err
	}
	defer u.lock.unlock()
	if e.ctx.Err() != nil {
		return errClosed
	}
	u.mu.Lock()
	gone := u.gone
	u.mu.Unlock()
	if gone {
		return errGone
	}

	plan, err := e.planner.Plan(ctx, u.id)
	if err != nil {
		return fmt.Errorf("planning the servers of %q: %w", u.id, err)
	}
	desired, order, problems := validatePlan(plan)

	now := time.Now()
	var (
		toClose   []*conn
		toConnect []ServerDecl
	)
	u.mu.Lock()
	for name, c := range u.conns {
		if d, ok := desired[name]; !ok || d.Fingerprint != c.fingerprint {
			toClose = append(toClose, u.retireLocked(c)...)
			u.disabled[name] = true
		}
	}
	for name := range u.quarantine {
		if _, ok := desired[name]; !ok {
			delete(u.quarantine, name)
			u.disabled[name] = true
		}
	}
	for _, name := range order {
		d := desired[name]
		if c := u.conns[name]; c != nil {
			c.decl = d // same connection; policy and timeout may have changed
			c.rebuildLocked()
			continue
		}
		if c := u.revivableLocked(name, d.Fingerprint); c != nil {
			delete(u.retiring, c)
			c.state = stateActive
			c.decl = d
			c.rebuildLocked()
			u.conns[name] = c
			delete(u.disabled, name)
			e.log.Info("catalog: revived", "user", u.id, "server", name)
			continue
		}
		if q := u.quarantine[name]; q != nil && q.fingerprint == d.Fingerprint && (q.signIn || (!q.busy && now.Before(q.next))) {
			continue // still waiting for its retry, or for a sign-in
		}
		toConnect = append(toConnect, d)
	}
	u.problems = problems
	u.mu.Unlock()
	e.closeConns(toClose)

	results := e.connectAll(ctx, u, toConnect)

	closing := e.ctx.Err() != nil
	var fresh, late []*conn
	u.mu.Lock()
	for _, r := range results {
		name := r.decl.Name
		switch {
		case r.c != nil && !closing && r.c.state == stateActive:
			u.conns[name] = r.c
			delete(u.quarantine, name)
			delete(u.disabled, name)
			fresh = append(fresh, r.c)
		case r.c != nil:
			// The engine is closing (and may have closed it already).
			if r.c.state != stateClosing {
				r.c.state = stateClosing
				late = append(late, r.c)
			}
		case r.cancelled:
			if !closing {
				// Not the server's fault: try again soon, without counting
				// a failure.
				q := u.quarantine[name]
				if q == nil || q.fingerprint != r.decl.Fingerprint {
					q = &quarantine{fingerprint: r.decl.Fingerprint}
					u.quarantine[name] = q
				}
				q.reason, q.opReason = "connecting was interrupted; it will be tried again", ""
				q.next = time.Now().Add(e.opts.Backoff.Min)
			}
		case r.signIn:
			u.quarantine[name] = &quarantine{fingerprint: r.decl.Fingerprint, reason: r.reason, signIn: true}
			e.log.Info("catalog: server needs sign-in", "user", u.id, "server", name)
		default:
			q := u.quarantine[name]
			if q == nil || q.fingerprint != r.decl.Fingerprint || q.signIn {
				q = &quarantine{fingerprint: r.decl.Fingerprint}
				u.quarantine[name] = q
			}
			q.failures++
			q.reason, q.opReason, q.busy = r.reason, r.opReason, r.busy
			q.next = time.Now().Add(e.opts.Backoff.delay(q.failures))
			e.repeats.Warn("catalog: server quarantined", u.id, name, cmp.Or(r.opReason, r.reason), "failures", q.failures, "retry", q.next)
		}
	}
	cat := u.catalogLocked()
	u.mu.Unlock()
	e.closeConns(late)
	for _, c := range fresh {
		e.startConn(c)
	}
	e.scheduleRetry(u)
	if closing {
		return errClosed
	}
	return e.publish(ctx, u, cat)
}

// validatePlan indexes the plan's servers by name, turning bad or doubled
// names into problems.
func validatePlan(p Plan) (map[string]ServerDecl, []string, []Problem) {
	desired := make(map[string]ServerDecl, len(p.Servers))
	order := make([]string, 0, len(p.Servers))
	problems := slices.Clone(p.Problems)
	for _, d := range p.Servers {
		switch {
		case d.Name == "" || strings.Contains(d.Name, "/"):
			problems = append(problems, Problem{Server: d.Name, Reason: "the server name is empty or contains \"/\""})
		case hasKey(desired, d.Name):
			problems = append(problems, Problem{Server: d.Name, Reason: "the server is declared twice; the first declaration is used"})
		default:
			desired[d.Name] = d
			order = append(order, d.Name)
		}
	}
	return desired, order, problems
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// catalogLocked builds everything the user has, servers in name order:
// tools and prompts as "server/name", resources and templates with the
// URIs the servers gave (a URI two servers offer goes to the first by
// name), and each server's instructions. u.mu must be held.
func (u *user) catalogLocked() *ext.Catalog {
	names := make([]string, 0, len(u.conns))
	n := 0
	for name, c := range u.conns {
		names = append(names, name)
		n += len(c.built)
	}
	slices.Sort(names)
	cat := &ext.Catalog{Tools: make([]ext.Tool, 0, n)}
	seenURI := map[string]bool{}
	seenTmpl := map[string]bool{}
	for _, name := range names {
		c := u.conns[name]
		cat.Tools = append(cat.Tools, c.built...)
		x := c.extras
		if x == nil {
			continue
		}
		for _, p := range x.Prompts {
			cat.Prompts = append(cat.Prompts, ext.Prompt{Name: name + "/" + p.Name, Definition: p.Definition})
		}
		for _, r := range x.Resources {
			if !seenURI[r.Name] {
				seenURI[r.Name] = true
				cat.Resources = append(cat.Resources, ext.Resource{URI: r.Name, Definition: r.Definition, Server: name})
			}
		}
		for _, t := range x.Templates {
			if !seenTmpl[t.Name] {
				seenTmpl[t.Name] = true
				cat.ResourceTemplates = append(cat.ResourceTemplates, ext.ResourceTemplate{URITemplate: t.Name, Definition: t.Definition, Server: name})
			}
		}
		if strings.TrimSpace(x.Instructions) != "" {
			cat.Instructions = append(cat.Instructions, ext.Instruction{Source: name, Text: x.Instructions})
		}
	}
	return cat
}

// publish publishes the user's catalog. A publish that started is not cut
// short by the caller giving up: the host must see the set the engine
// acts on.
func (e *Engine) publish(ctx context.Context, u *user, cat *ext.Catalog) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.ConnectTimeout)
	defer cancel()
	if err := e.pub.Publish(pctx, u.id, cat); err != nil {
		e.log.Warn("catalog: publishing tools failed", "user", u.id, "error", err)
		return fmt.Errorf("publishing the tools of %q: %w", u.id, err)
	}
	return nil
}

// scheduleRetry arms u's retry timer for its earliest quarantined server.
func (e *Engine) scheduleRetry(u *user) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e.stopRetryLocked(u)
	if u.gone || e.ctx.Err() != nil {
		return
	}
	var next time.Time
	for _, q := range u.quarantine {
		if q.signIn {
			continue // waits for a sign-in, not for time
		}
		if next.IsZero() || q.next.Before(next) {
			next = q.next
		}
	}
	if next.IsZero() {
		return
	}
	e.mu.Lock()
	if e.noSpawn {
		e.mu.Unlock()
		return
	}
	e.wg.Add(1) // released by the timer's function, or by a Stop that wins
	e.mu.Unlock()
	u.retry = time.AfterFunc(max(time.Until(next), 0), func() {
		defer e.wg.Done()
		if err := e.refresh(e.ctx, u); err != nil && !errors.Is(err, errGone) && e.ctx.Err() == nil {
			e.log.Warn("catalog: retry refresh failed", "user", u.id, "error", err)
		}
	})
}

// stopRetryLocked disarms u's retry timer. u.mu must be held.
func (e *Engine) stopRetryLocked(u *user) {
	if u.retry != nil {
		if u.retry.Stop() {
			e.wg.Done()
		}
		u.retry = nil
	}
}

// Close stops the engine: it refuses new work, cancels connects and
// retries, lets running calls finish until ctx ends, closes every
// connection and joins every goroutine it started. It is idempotent; every
// call returns once the first has finished.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() { e.closeErr = e.close(ctx) })
	return e.closeErr
}

func (e *Engine) close(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	users := make([]*user, 0, len(e.users))
	for _, u := range e.users {
		users = append(users, u)
	}
	e.mu.Unlock()
	e.cancel()

	for _, u := range users {
		locked := u.lock.lock(ctx) == nil
		var toClose []*conn
		u.mu.Lock()
		e.stopRetryLocked(u)
		for _, c := range u.conns {
			toClose = append(toClose, u.retireLocked(c)...)
		}
		u.mu.Unlock()
		if locked {
			u.lock.unlock()
		}
		e.closeConns(toClose)
	}

	// Drain: running calls finish and close their connections.
	var forced error
	for {
		e.mu.Lock()
		var c *conn
		for x := range e.live {
			c = x
			break
		}
		e.mu.Unlock()
		if c == nil {
			break
		}
		select {
		case <-c.closed:
			continue
		case <-ctx.Done():
		}
		// Out of time: close what is left, running calls or not.
		forced = fmt.Errorf("catalog: closing: calls still running when %w; their connections were closed", ctx.Err())
		e.mu.Lock()
		rest := make([]*conn, 0, len(e.live))
		for x := range e.live {
			rest = append(rest, x)
		}
		e.mu.Unlock()
		var toClose []*conn
		for _, x := range rest {
			x.u.mu.Lock()
			if x.state != stateClosing {
				if x.u.conns[x.name] == x {
					delete(x.u.conns, x.name)
				}
				delete(x.u.retiring, x)
				x.state = stateClosing
				toClose = append(toClose, x)
			}
			x.u.mu.Unlock()
		}
		e.closeConns(toClose)
		for _, x := range rest {
			<-x.closed
		}
		break
	}

	e.mu.Lock()
	e.noSpawn = true
	e.mu.Unlock()
	e.wg.Wait()
	e.repeats.Close()
	return forced
}
