package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/supervisor"
)

// The states of an extension.
const (
	StateStarting   = "starting"
	StateRunning    = "running"
	StateRestarting = "restarting"
	StateFailed     = "failed"
	StateStopped    = "stopped"
)

const (
	restartBackoffMin = 100 * time.Millisecond
	restartBackoffMax = 30 * time.Second
	// stableAfter resets the backoff once an instance has run this long.
	stableAfter = time.Minute
)

// extension is the host's record of one extension: its carrier (an
// in-process Go value or a supervised process), its descriptor, and its
// restart state. The extension owns its supervisor instance and the
// watcher goroutine, and waits for both in stop.
type extension struct {
	h      *Host
	name   string
	logger *slog.Logger
	spec   *supervisor.Spec // nil for in-process extensions
	config []byte

	mu       sync.Mutex
	cur      ext.Extension
	inst     *supervisor.Instance
	desc     *ext.Descriptor
	gen      int
	state    string
	lastErr  error
	restarts int
	started  time.Time
	backoff  time.Duration
	ready    chan struct{} // closed while the current generation is usable
	changed  chan struct{} // closed and replaced on every state change
	stopping bool
	stopCh   chan struct{}

	wg sync.WaitGroup
}

// ExtensionInfo describes an extension for status pages and the CLI.
type ExtensionInfo = api.ExtensionInfo

func (e *extension) info() ExtensionInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	inf := ExtensionInfo{Name: e.name, State: e.state, Restarts: e.restarts, InProcess: e.spec == nil}
	if e.lastErr != nil {
		inf.Error = e.lastErr.Error()
	}
	if e.desc != nil {
		inf.Version, inf.Description, inf.Capabilities = e.desc.Version, e.desc.Description, e.desc.Capabilities
	}
	if e.inst != nil {
		inf.PID = e.inst.PID()
	}
	if e.spec != nil {
		inf.Path = e.spec.Path
	}
	return inf
}

func (e *extension) descriptor() *ext.Descriptor {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.desc
}

// changedLocked wakes everyone waiting for a state change.
func (e *extension) changedLocked() {
	if e.changed != nil {
		close(e.changed)
	}
	e.changed = make(chan struct{})
}

// start launches and configures the first generation.
func (e *extension) start(ctx context.Context, inproc ext.Extension) error {
	e.mu.Lock()
	e.state = StateStarting
	e.ready = make(chan struct{})
	e.stopCh = make(chan struct{})
	e.changedLocked()
	e.mu.Unlock()
	if err := e.launch(ctx, inproc); err != nil {
		e.mu.Lock()
		e.state, e.lastErr = StateFailed, err
		e.mu.Unlock()
		return err
	}
	return nil
}

// launch brings up one generation: start (or take the Go value), describe,
// configure, and watch it.
func (e *extension) launch(ctx context.Context, inproc ext.Extension) error {
	var (
		carrier ext.Extension
		inst    *supervisor.Instance
	)
	if e.spec != nil {
		var err error
		inst, err = supervisor.Launch(ctx, *e.spec, e.h.logger)
		if err != nil {
			return err
		}
		carrier = inst.Client
	} else {
		carrier = inproc
	}
	fail := func(err error) error {
		if inst != nil {
			inst.Kill()
		}
		return err
	}
	desc, err := carrier.Describe(ctx)
	if err != nil {
		return fail(fmt.Errorf("describing extension %q: %w", e.name, err))
	}
	if desc == nil {
		return fail(fmt.Errorf("extension %q described itself as nil", e.name))
	}
	if desc.Name != e.name {
		// Its tools, settings and secrets would live under one name and
		// its logs and descriptor under another.
		return fail(fmt.Errorf("extension registered as %q describes itself as %q: register it under its own name, %q", e.name, desc.Name, desc.Name))
	}
	if err := e.h.checkSections(e.name, desc); err != nil {
		return fail(err)
	}
	e.mu.Lock()
	e.desc = desc
	e.gen++
	gen := e.gen
	e.mu.Unlock()
	hs := &hostServices{h: e.h, ext: e.name}
	if err := carrier.Configure(ctx, &ext.ConfigureRequest{Name: e.name, Config: e.config, Host: hs, BaseDir: e.h.cfg.dir}); err != nil {
		return fail(fmt.Errorf("configuring extension %q: %w", e.name, err))
	}
	// Describe again: settings sections may depend on the config (ext-mcp
	// offers one toggle per configured server).
	if d2, err := carrier.Describe(ctx); err == nil && d2 != nil {
		if err := e.h.checkSections(e.name, d2); err != nil {
			return fail(err)
		}
		e.mu.Lock()
		e.desc = d2
		e.mu.Unlock()
	}
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		return fail(fmt.Errorf("extension %q: %w", e.name, errStopping))
	}
	e.cur, e.inst = carrier, inst
	e.state, e.lastErr = StateRunning, nil
	e.started = time.Now()
	close(e.ready)
	e.changedLocked()
	e.mu.Unlock()
	e.logger.Info("extension ready", "version", desc.Version, "capabilities", desc.Capabilities, "generation", gen)
	if inst != nil {
		e.wg.Add(1)
		go e.watch(inst, gen)
	}
	return nil
}

// watch waits for the instance of generation gen to exit and restarts it
// unless the host is stopping it.
func (e *extension) watch(inst *supervisor.Instance, gen int) {
	defer e.wg.Done()
	select {
	case <-inst.Done():
	case <-e.stopCh:
		return
	}
	e.mu.Lock()
	if e.stopping || e.gen != gen {
		e.mu.Unlock()
		return
	}
	e.state = StateRestarting
	e.lastErr = fmt.Errorf("extension %q exited unexpectedly", e.name)
	e.ready = make(chan struct{})
	e.cur = nil
	e.changedLocked()
	if time.Since(e.started) > stableAfter || e.backoff == 0 {
		e.backoff = restartBackoffMin
	} else {
		e.backoff = min(e.backoff*2, restartBackoffMax)
	}
	e.mu.Unlock()
	e.logger.Error("extension crashed; restarting", "generation", gen)
	inst.Kill() // reap go-plugin's goroutines for the dead process
	e.restartLoop()
}

// restartLoop relaunches with backoff until it succeeds or the host stops.
// Exactly one loop runs per crash: only the watcher of the crashed
// generation starts it.
func (e *extension) restartLoop() {
	for {
		e.mu.Lock()
		wait := e.backoff
		e.mu.Unlock()
		select {
		case <-time.After(wait):
		case <-e.stopCh:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		go func() {
			select {
			case <-e.stopCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := e.launch(ctx, nil)
		cancel()
		e.mu.Lock()
		if err == nil {
			e.restarts++
			e.mu.Unlock()
			e.logger.Info("extension restarted", "restarts", e.restarts)
			e.h.reactivate(e)
			return
		}
		e.lastErr = err
		e.backoff = min(e.backoff*2, restartBackoffMax)
		stopping := e.stopping
		e.mu.Unlock()
		if stopping {
			return
		}
		e.logger.Error("restarting extension failed; will retry", "error", err, "retry_in", e.backoff)
	}
}

// get returns the current carrier, waiting while a restart is underway. A
// process that has exited but whose watcher has not yet noticed counts as
// restarting: a call that arrives in that instant waits for the new
// generation instead of failing on the dead connection.
func (e *extension) get(ctx context.Context) (ext.Extension, error) {
	for {
		e.mu.Lock()
		cur, inst, ready, changed, state, lastErr := e.cur, e.inst, e.ready, e.changed, e.state, e.lastErr
		e.mu.Unlock()
		wait := ready
		switch {
		case cur != nil && state == StateRunning && (inst == nil || !isDone(inst.Done())):
			return cur, nil
		case state == StateStopped:
			return nil, fmt.Errorf("extension %q is stopped: %w", e.name, ext.ErrUnavailable)
		case state == StateFailed:
			return nil, fmt.Errorf("extension %q failed: %v: %w", e.name, lastErr, ext.ErrUnavailable)
		case state == StateRunning:
			// Exited, not yet noticed: wait for the watcher's state change.
			wait = changed
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("extension %q is %s (%v): %w", e.name, state, lastErr, errors.Join(ctx.Err(), ext.ErrUnavailable))
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// use runs fn with the current generation as capability C (listed in the
// descriptor as cap). A call that never reached the extension — it had just
// died, see [ext.NotDelivered] — runs once more on the restarted one; a
// delivered call never does, whatever its replay safety. Errors are
// wrapped with op, which is built only when there is one.
func use[C any](ctx context.Context, e *extension, capability ext.Capability, op func() string, fn func(C) error) error {
	for attempt := 0; ; attempt++ {
		cur, err := e.get(ctx)
		if err != nil {
			return err
		}
		c, ok := cur.(C)
		if !ok || !e.descriptor().Has(capability) {
			return fmt.Errorf("extension %q offers no %s capability: %w", e.name, capability, ext.ErrUnimplemented)
		}
		err = fn(c)
		if err == nil {
			return nil
		}
		if attempt == 0 && ext.NotDelivered(err) {
			continue
		}
		return e.wrapErr(op(), err)
	}
}

// wrapErr turns a transport failure into a clear error naming the
// extension.
func (e *extension) wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ext.ErrUnavailable) {
		return fmt.Errorf("extension %q is unavailable (%s failed; it may have crashed and is being restarted): %w", e.name, op, err)
	}
	return fmt.Errorf("extension %q: %s: %w", e.name, op, err)
}

// stop shuts the extension down and waits for its goroutines.
func (e *extension) stop(ctx context.Context) error {
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		e.wg.Wait()
		return nil
	}
	e.stopping = true
	cur, inst := e.cur, e.inst
	e.state = StateStopped
	e.cur = nil
	e.changedLocked()
	if e.stopCh != nil {
		close(e.stopCh)
	}
	e.mu.Unlock()
	var err error
	if cur != nil {
		if serr := cur.Shutdown(ctx); serr != nil && !errors.Is(serr, ext.ErrUnavailable) {
			err = fmt.Errorf("stopping extension %q: %w", e.name, serr)
		}
	}
	e.wg.Wait()
	// A restart may have brought up a new instance while we stopped.
	e.mu.Lock()
	if e.inst != nil && e.inst != inst {
		inst = e.inst
	}
	e.mu.Unlock()
	if inst != nil {
		inst.Kill()
	}
	return err
}

// sortedExtensions returns the host's extensions by name.
func sortedExtensions(m map[string]*extension) []*extension {
	out := make([]*extension, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

var errStopping = errors.New("the host is stopping")
