package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// The states of a [Managed] extension.
const (
	StateStarting   = "starting"
	StateRunning    = "running"
	StateRestarting = "restarting"
	StateFailed     = "failed"
	StateStopped    = "stopped"
)

// Generation is one running generation of an extension, as a
// [LaunchFunc] brought it up (launched, described, configured).
type Generation struct {
	// Ext is the carrier: the Go value in process, or the client of the
	// process.
	Ext ext.Extension
	// Desc is the descriptor the generation gave.
	Desc *ext.Descriptor
	// Instance is the process; nil in process (such a generation never
	// exits and is never restarted).
	Instance *Instance
}

// done is closed when the generation's process has exited; nil (never) in
// process.
func (g *Generation) done() <-chan struct{} {
	if g.Instance == nil {
		return nil
	}
	return g.Instance.Done()
}

// kill stops the generation's process, if any, and waits for it.
func (g *Generation) kill() {
	if g.Instance != nil {
		g.Instance.Kill()
	}
}

// LaunchFunc brings up one generation. ctx bounds the launch; on error it
// leaves nothing running.
type LaunchFunc func(ctx context.Context) (*Generation, error)

// ManagedOptions tunes a [Managed]; nil means the defaults.
type ManagedOptions struct {
	// Logger receives the lifecycle's logs (default: discard).
	Logger *slog.Logger
	// OnRestart runs after each successful restart, on the restart's
	// goroutine, with a context that ends when the extension is stopped
	// (the host re-activates its users there).
	OnRestart func(ctx context.Context)
	// OnCrash runs when a generation exited on its own, on its watcher's
	// goroutine, before the restart begins: no caller can be handed the
	// next generation before it returns (the host marks its users as
	// being re-activated there).
	OnCrash func()
	// BackoffMin and BackoffMax space restart attempts (default 100 ms and
	// 30 s); the backoff starts over once a generation has run for
	// StableAfter (default 1 min).
	BackoffMin, BackoffMax, StableAfter time.Duration
	// LaunchTimeout bounds each restart attempt (default 60 s).
	LaunchTimeout time.Duration
	_             struct{}
}

// Managed keeps one extension running: it brings up the first generation,
// watches each generation's process, restarts it with backoff when it
// exits on its own (one restart loop however many callers saw the crash),
// and hands callers the current generation, making them wait while a
// restart is underway. A Managed owns its generations and its goroutines,
// which run under its lifetime context; Stop cancels that context, shuts
// the current generation down and waits for them all. Its methods are
// safe for concurrent use.
type Managed struct {
	name   string
	launch LaunchFunc
	opts   ManagedOptions
	log    *slog.Logger

	// life ends when Stop starts; every goroutine of the Managed runs
	// under it and is joined by Stop.
	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	stopOnce sync.Once
	stopErr  error

	mu       sync.Mutex
	cur      *Generation // nil while not running
	desc     *ext.Descriptor
	gen      int
	state    string
	lastErr  error
	restarts int
	started  time.Time
	backoff  time.Duration
	changed  chan struct{} // closed and replaced on every state change
	// asked is the reason of a restart asked for ([Managed.Restart]),
	// until its generation's watcher saw it exit.
	asked string
}

// Start brings up the first generation of the extension name with launch
// and watches it. ctx bounds this first launch only. On error nothing is
// left running.
func Start(ctx context.Context, name string, launch LaunchFunc, opts *ManagedOptions) (*Managed, error) {
	var o ManagedOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(30*time.Second, o.BackoffMin)
	}
	if o.StableAfter <= 0 {
		o.StableAfter = time.Minute
	}
	if o.LaunchTimeout <= 0 {
		o.LaunchTimeout = 60 * time.Second
	}
	m := &Managed{name: name, launch: launch, opts: o, log: o.Logger, state: StateStarting, changed: make(chan struct{})}
	m.life, m.cancel = context.WithCancel(context.Background())
	// The first launch ends with ctx or with Stop, whichever is first.
	lctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.life, cancel)
	g, err := launch(lctx)
	stop()
	cancel()
	if err != nil {
		m.cancel()
		return nil, err
	}
	m.install(g)
	return m, nil
}

// install makes g the current generation and watches it. Once Stop has
// begun it kills g instead and reports false.
func (m *Managed) install(g *Generation) bool {
	m.mu.Lock()
	if m.life.Err() != nil {
		m.mu.Unlock()
		g.kill()
		return false
	}
	m.cur, m.desc = g, g.Desc
	m.gen++
	gen := m.gen
	m.state, m.lastErr = StateRunning, nil
	m.started = time.Now()
	m.changedLocked()
	m.mu.Unlock()
	m.log.Info("extension ready", "version", g.Desc.Version, "capabilities", g.Desc.Capabilities, "generation", gen)
	if g.Instance != nil {
		m.wg.Add(1)
		go m.watch(g, gen)
	}
	return true
}

// changedLocked wakes everyone waiting for a state change.
func (m *Managed) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// watch waits for generation gen to exit and restarts the extension
// unless it is being stopped.
func (m *Managed) watch(g *Generation, gen int) {
	defer m.wg.Done()
	select {
	case <-g.done():
	case <-m.life.Done():
		return
	}
	m.mu.Lock()
	if m.life.Err() != nil || m.gen != gen {
		m.mu.Unlock()
		return
	}
	m.state = StateRestarting
	asked := m.asked
	m.asked = ""
	m.lastErr = fmt.Errorf("extension %q exited unexpectedly", m.name)
	if asked != "" {
		m.lastErr = fmt.Errorf("extension %q restarted: %s", m.name, asked)
	}
	m.cur = nil
	m.changedLocked()
	if time.Since(m.started) > m.opts.StableAfter || m.backoff == 0 || asked != "" {
		m.backoff = m.opts.BackoffMin
	} else {
		m.backoff = min(m.backoff*2, m.opts.BackoffMax)
	}
	m.mu.Unlock()
	if asked != "" {
		m.log.Info("extension stopped to restart", "generation", gen, "reason", asked)
	} else {
		m.log.Error("extension crashed; restarting", "generation", gen)
	}
	if m.opts.OnCrash != nil {
		m.opts.OnCrash()
	}
	g.kill() // reap go-plugin's goroutines for the dead process
	m.restartLoop()
}

// restartLoop relaunches with backoff until it succeeds or the extension
// is stopped. Exactly one loop runs per crash: only the watcher of the
// crashed generation starts it.
func (m *Managed) restartLoop() {
	for {
		m.mu.Lock()
		wait := m.backoff
		m.mu.Unlock()
		select {
		case <-time.After(wait):
		case <-m.life.Done():
			return
		}
		ctx, cancel := context.WithTimeout(m.life, m.opts.LaunchTimeout)
		g, err := m.launch(ctx)
		cancel()
		if err == nil {
			if !m.install(g) {
				return // stopped while it came up
			}
			m.mu.Lock()
			m.restarts++
			restarts := m.restarts
			m.mu.Unlock()
			m.log.Info("extension restarted", "restarts", restarts)
			if m.opts.OnRestart != nil {
				m.opts.OnRestart(m.life)
			}
			return
		}
		m.mu.Lock()
		m.lastErr = err
		m.backoff = min(m.backoff*2, m.opts.BackoffMax)
		next := m.backoff
		m.mu.Unlock()
		if m.life.Err() != nil {
			return
		}
		m.log.Error("restarting extension failed; will retry", "error", err, "retry_in", next)
	}
}

// Get returns the current generation, waiting while a restart is underway
// or until ctx ends. A process that has exited but whose watcher has not
// yet noticed counts as restarting: a call that arrives in that instant
// waits for the new generation instead of failing on the dead connection.
func (m *Managed) Get(ctx context.Context) (*Generation, error) {
	for {
		m.mu.Lock()
		cur, changed, state, lastErr := m.cur, m.changed, m.state, m.lastErr
		m.mu.Unlock()
		switch {
		case cur != nil && !isDone(cur.done()):
			return cur, nil
		case state == StateStopped:
			return nil, fmt.Errorf("extension %q is stopped: %w", m.name, ext.ErrUnavailable)
		case state == StateFailed:
			return nil, fmt.Errorf("extension %q failed: %v: %w", m.name, lastErr, ext.ErrUnavailable)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("extension %q is %s (%v): %w", m.name, state, lastErr, ext.Mark(ctx.Err(), ext.ErrUnavailable))
		}
	}
}

// Replace returns a generation other than failed, on which a call could
// not be delivered (its call channel or connection is dead although the
// process may not have been seen to exit yet): failed is killed if it is
// still current, which its watcher turns into a restart, and Replace
// waits for the new generation like [Managed.Get].
func (m *Managed) Replace(ctx context.Context, failed *Generation) (*Generation, error) {
	if failed == nil || failed.Instance == nil {
		return m.Get(ctx) // in process: nothing to replace
	}
	m.mu.Lock()
	current := m.cur == failed
	m.mu.Unlock()
	if current && !isDone(failed.done()) {
		m.log.Warn("a call could not reach the extension; restarting it")
		failed.kill()
	}
	return m.Get(ctx) // failed is done now: Get waits for its successor
}

// Restart stops the current process so that a new generation (launched
// anew, so with what the launch function reads now) replaces it, as after
// a crash, and waits for it like [Managed.Get]. reason is logged. An
// in-process generation cannot restart: Restart fails.
func (m *Managed) Restart(ctx context.Context, reason string) (*Generation, error) {
	g, err := m.Get(ctx)
	if err != nil {
		return nil, err
	}
	if g.Instance == nil {
		return nil, fmt.Errorf("extension %q runs in process and cannot restart", m.name)
	}
	m.mu.Lock()
	if m.cur == g {
		m.asked = reason
	}
	m.mu.Unlock()
	// Shut it down as Stop does (it releases what it holds), then stop
	// the process; its watcher starts the next generation.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = g.Ext.Shutdown(sctx)
	cancel()
	g.kill()
	return m.Get(ctx)
}

// SetDescriptor replaces the descriptor of the current generation (the
// extension described itself anew after a change of config in place).
func (m *Managed) SetDescriptor(d *ext.Descriptor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.desc = d
}

func isDone(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Descriptor returns the last descriptor the extension gave (kept while
// it restarts).
func (m *Managed) Descriptor() *ext.Descriptor {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.desc
}

// Info is a snapshot of a Managed's lifecycle.
type Info struct {
	State    string
	LastErr  error
	Restarts int
	// PID is the current process's, 0 in process or while none runs.
	PID int
}

// Info returns the lifecycle's state.
func (m *Managed) Info() Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	inf := Info{State: m.state, LastErr: m.lastErr, Restarts: m.restarts}
	if m.cur != nil && m.cur.Instance != nil {
		inf.PID = m.cur.Instance.PID()
	}
	return inf
}

// Stop ends the lifetime context (a restart in progress gives up), shuts
// the current generation down within ctx, waits for every goroutine of the
// Managed and kills the process. It is idempotent; every call returns once
// the first has finished.
func (m *Managed) Stop(ctx context.Context) error {
	m.stopOnce.Do(func() {
		m.cancel()
		m.mu.Lock()
		cur := m.cur
		m.cur = nil
		m.state = StateStopped
		m.changedLocked()
		m.mu.Unlock()
		if cur != nil {
			if err := cur.Ext.Shutdown(ctx); err != nil && !errors.Is(err, ext.ErrUnavailable) {
				m.stopErr = fmt.Errorf("stopping extension %q: %w", m.name, err)
			}
		}
		// A restart that raced with the cancel installs nothing (install
		// checks the lifetime) and its goroutine ends here.
		m.wg.Wait()
		if cur != nil {
			cur.kill()
		}
	})
	return m.stopErr
}
