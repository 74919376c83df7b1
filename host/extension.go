package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/supervisor"
)

// The states of an extension.
const (
	StateStarting   = supervisor.StateStarting
	StateRunning    = supervisor.StateRunning
	StateRestarting = supervisor.StateRestarting
	StateFailed     = supervisor.StateFailed
	StateStopped    = supervisor.StateStopped
)

// extension is the host's record of one extension: how to bring up a
// generation of it (launch the process or take the Go value, describe,
// check, configure), and its lifecycle, which the supervisor's [Managed]
// owns: the current generation, the watcher and the restarts.
type extension struct {
	h      *Host
	name   string
	logger *slog.Logger
	spec   *supervisor.Spec // nil for in-process extensions
	// config is the extension's config block, replaced by a reload
	// (reload.go); guarded by cmu, read by each launch.
	cmu    sync.Mutex
	config []byte
	// actAsUsers: the operator granted it ext.UserActor.
	actAsUsers bool

	// m is set once start succeeded and never changes after; startErr
	// says why start failed.
	m        *supervisor.Managed
	startErr error

	// reacts holds, from a crash until the restarted generation has
	// re-activated them, the users that were active: a call for such a
	// user waits for its user's re-activation (awaitUser) instead of
	// reaching a generation that does not know them yet (ext-mcp would
	// answer that the tool is gone).
	rmu    sync.Mutex
	reacts map[string]*reactivation
}

// reactivation is one user's re-activation in an extension after a crash;
// done is closed (once) when it ended, however it ended. A call that
// waits for it puts the user on hurry (once), the queue of the users whose
// re-activation goes first.
type reactivation struct {
	done  chan struct{}
	once  sync.Once
	want  sync.Once
	hurry chan string // shared by the crash's reactivations
}

func (r *reactivation) finish() { r.once.Do(func() { close(r.done) }) }

// crashed marks users as being re-activated in e: called when a generation
// exited, before its successor can be handed to a caller. A re-activation
// still pending from an earlier crash ends: the generation it waited for
// is gone, and its waiters find the new mark on their next attempt.
func (e *extension) crashed(users []string) {
	e.rmu.Lock()
	defer e.rmu.Unlock()
	for _, r := range e.reacts {
		r.finish()
	}
	e.reacts = make(map[string]*reactivation, len(users))
	hurry := make(chan string, len(users))
	for _, u := range users {
		e.reacts[u] = &reactivation{done: make(chan struct{}), hurry: hurry}
	}
}

// pendingReactivations returns the users marked by the last crash whose
// re-activation has not ended.
func (e *extension) pendingReactivations() map[string]*reactivation {
	e.rmu.Lock()
	defer e.rmu.Unlock()
	return maps.Clone(e.reacts)
}

// reactivated ends user's re-activation r (when still the current one).
func (e *extension) reactivated(user string, r *reactivation) {
	r.finish()
	e.rmu.Lock()
	if e.reacts[user] == r {
		delete(e.reacts, user)
	}
	e.rmu.Unlock()
}

// awaitUser waits while user's re-activation after a restart of e is
// underway, at most activationTimeout (the bound of the re-activation
// itself, and of a first activation, which a first call waits for too)
// and as long as ctx allows. Past either it answers unavailable: the call
// may be retried.
func (e *extension) awaitUser(ctx context.Context, user string) error {
	if user == "" {
		return nil
	}
	e.rmu.Lock()
	r := e.reacts[user]
	e.rmu.Unlock()
	if r == nil {
		return nil
	}
	// A user who waits is re-activated before those who do not. (The
	// queue holds every user of the crash: never full.)
	r.want.Do(func() {
		select {
		case r.hurry <- user:
		default:
		}
	})
	t := time.NewTimer(activationTimeout)
	defer t.Stop()
	select {
	case <-r.done:
		return nil
	case <-t.C:
		return fmt.Errorf("extension %q restarted and has not re-activated user %q within %v; retry: %w", e.name, user, activationTimeout, ext.ErrUnavailable)
	case <-ctx.Done():
		return fmt.Errorf("extension %q restarted and is re-activating user %q; retry: %w", e.name, user, ext.Mark(ctx.Err(), ext.ErrUnavailable))
	}
}

// ExtensionInfo describes an extension for status pages and the CLI.
type ExtensionInfo = api.ExtensionInfo

func (e *extension) info() ExtensionInfo {
	inf := ExtensionInfo{Name: e.name, InProcess: e.spec == nil}
	if e.spec != nil {
		inf.Path = e.spec.Path
	}
	if e.m == nil {
		inf.State = StateFailed
		if e.startErr != nil {
			inf.Error = e.startErr.Error()
		}
		return inf
	}
	li := e.m.Info()
	inf.State, inf.Restarts, inf.PID = li.State, li.Restarts, li.PID
	if li.LastErr != nil {
		inf.Error = li.LastErr.Error()
	}
	if d := e.m.Descriptor(); d != nil {
		inf.Version, inf.Description, inf.Capabilities = d.Version, d.Description, d.Capabilities
	}
	return inf
}

// descriptor returns the extension's descriptor, nil when it never
// started.
func (e *extension) descriptor() *ext.Descriptor {
	if e.m == nil {
		return nil
	}
	return e.m.Descriptor()
}

// start brings up the first generation (inproc, or the process of spec)
// and hands it to a supervisor.Managed, which restarts a process that
// crashes and then re-activates the users.
func (e *extension) start(ctx context.Context, inproc ext.Extension) error {
	m, err := supervisor.Start(ctx, e.name, func(ctx context.Context) (*supervisor.Generation, error) {
		return e.launch(ctx, inproc)
	}, &supervisor.ManagedOptions{
		Logger:    e.logger,
		OnRestart: func(ctx context.Context) { e.h.reactivate(ctx, e) },
		OnCrash: func() {
			if e.descriptor().Has(ext.CapabilityUsers) {
				e.crashed(e.h.ActiveUsers())
			}
		},
	})
	if err != nil {
		e.startErr = err
		return err
	}
	e.m = m
	return nil
}

// launch brings up one generation: start the process (or take the Go
// value), describe, check, configure, describe again.
func (e *extension) launch(ctx context.Context, inproc ext.Extension) (*supervisor.Generation, error) {
	g := &supervisor.Generation{Ext: inproc}
	if e.spec != nil {
		inst, err := supervisor.Launch(ctx, *e.spec, e.h.logger)
		if err != nil {
			return nil, err
		}
		g.Ext, g.Instance = inst.Client, inst
	}
	fail := func(err error) (*supervisor.Generation, error) {
		if g.Instance != nil {
			g.Instance.Kill()
		}
		return nil, err
	}
	desc, err := g.Ext.Describe(ctx)
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
	hs := &hostServices{h: e.h, ext: e.name, userTools: desc.Has(ext.CapabilityUserTools)}
	if err := g.Ext.Configure(ctx, &ext.ConfigureRequest{Name: e.name, Config: e.currentConfig(), Host: hs, BaseDir: e.h.cfg.dir,
		PublicURL: e.h.cfg.BaseURL(), ListenAddr: e.h.cfg.ListenAddr()}); err != nil {
		return fail(fmt.Errorf("configuring extension %q: %w", e.name, err))
	}
	g.Desc = desc
	// Describe again: settings sections may depend on the config (ext-mcp
	// offers one toggle per configured server).
	if d2, err := g.Ext.Describe(ctx); err == nil && d2 != nil && d2.Name == e.name {
		if err := e.h.checkSections(e.name, d2); err != nil {
			return fail(err)
		}
		g.Desc = d2
	}
	if err := e.h.checkSandbox(e.name, g.Desc); err != nil {
		return fail(err)
	}
	return g, nil
}

// checkSandbox refuses an extension that asks for sandboxed processes on a
// host that cannot sandbox them, unless the operator accepted the risk.
func (h *Host) checkSandbox(name string, d *ext.Descriptor) error {
	if !d.Has(ext.CapabilitySandbox) {
		return nil
	}
	kind, reason := h.services.Sandboxing()
	if kind != "" || h.cfg.Services.UnsafeSharedUID {
		return nil
	}
	return fmt.Errorf("extension %q starts untrusted service processes (ext-mcp: the users' own stdio servers of userServers \"all\", "+
		"and servers with \"sandbox\": true), which must run in a sandbox, but none works here: %v. "+
		"To run them anyway as the host's own user, where they can read the data folder (the secrets key, the databases) "+
		"and other users' tokens, set services.unsafeSharedUID: true in the operator's file", name, reason)
}

// get returns the current generation's carrier, waiting while a restart
// is underway or until ctx ends.
func (e *extension) get(ctx context.Context) (*supervisor.Generation, error) {
	if e.m == nil {
		return nil, fmt.Errorf("extension %q failed to start: %v: %w", e.name, e.startErr, ext.ErrUnavailable)
	}
	return e.m.Get(ctx)
}

// use runs fn with the current generation as capability C (listed in the
// descriptor as cap). A call that never reached the extension — it had just
// died, see [ext.NotDelivered] — runs once more on the restarted one; a
// delivered call never does, whatever its replay safety. Errors are
// wrapped with op, which is built only when there is one. use serves the
// host's own lifecycle calls; a request made for a user goes through
// [useFor].
func use[C any](ctx context.Context, e *extension, capability ext.Capability, op func() string, fn func(C) error) error {
	return useFor(ctx, e, "", capability, op, fn)
}

// useFor is [use] for a request of user: on a generation that restarted
// after a crash, it first waits for user's re-activation there (see
// [extension.awaitUser]).
func useFor[C any](ctx context.Context, e *extension, user string, capability ext.Capability, op func() string, fn func(C) error) error {
	g, err := e.get(ctx)
	for attempt := 0; ; attempt++ {
		if err == nil {
			err = e.awaitUser(ctx, user)
		}
		if err != nil {
			return err
		}
		c, ok := g.Ext.(C)
		if !ok || !e.descriptor().Has(capability) {
			return fmt.Errorf("extension %q offers no %s capability: %w", e.name, capability, ext.ErrUnimplemented)
		}
		err = fn(c)
		if err == nil {
			return nil
		}
		if attempt == 0 && ext.NotDelivered(err) {
			g, err = e.m.Replace(ctx, g)
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

// stop shuts the extension down and waits for its goroutines and
// process.
func (e *extension) stop(ctx context.Context) error {
	if e.m == nil {
		return nil
	}
	return e.m.Stop(ctx)
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
