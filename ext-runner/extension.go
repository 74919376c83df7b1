package extrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agenthost/agenthost/ext/cgroup"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// Version is stamped at build time.
var Version = "dev"

// keptRuns is how many finished runs a runner's status keeps.
const keptRuns = 5

// ledgerSecret is the operator's secret (of this extension) that lists the
// tokens minted and not yet revoked, by ID: what a crash left alive is
// revoked at the next start.
const ledgerSecret = "runner-live-tokens"

// ActionRun is the action that starts a runner's session now.
const ActionRun = "run"

// Extension is the runner extension. Its methods are safe for concurrent
// use. It owns every goroutine and agent process it starts: the queue's
// sessions, the schedule and the resource watchers, all ended and waited
// for by Shutdown.
type Extension struct {
	log *slog.Logger

	mu        sync.Mutex
	host      ext.Host
	ua        ext.UserActor
	cfg       *Config
	publicURL string
	runners   map[string]*runnerState // by key (runnerKey)
	slots     chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	closed    bool
	wg        sync.WaitGroup

	ledgerMu sync.Mutex

	// cg is the sessions' cgroup tree (nil: none, cgErr says why; agents
	// are then contained by their process group only). Set by Configure.
	cg    *cgroup.Tree
	cgErr error

	// dirMu guards dirs, the live sessions' folders.
	dirMu sync.Mutex
	dirs  map[string]bool
}

// New returns the extension, unconfigured.
func New(log *slog.Logger) *Extension {
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return &Extension{log: log, dirs: map[string]bool{}}
}

// runnerState is one runner's queue and history, guarded by Extension.mu.
type runnerState struct {
	name    string
	user    string
	cfg     *Runner
	profile *Profile
	// err says why the runner is off (nil: on).
	err     error
	running int
	waiting int // of running: waiting for a global slot
	pending bool
	runs    []Run // newest first
	current []*tail
	// watch is the resource trigger's state, for the status.
	watch string
	// own marks a runner its user declared (settings); stop ends its
	// triggers.
	own  bool
	stop context.CancelFunc
}

func runnerKey(user, name string) string { return user + "/" + name }

var (
	_ ext.Extension      = (*Extension)(nil)
	_ ext.StatusReporter = (*Extension)(nil)
	_ ext.ActionRunner   = (*Extension)(nil)
)

// Describe implements [ext.Extension].
func (e *Extension) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{
		Name: "runner", Version: Version,
		Description:  "Runs agent sessions for users: each with one scope's tools, a token that expires, a folder of its own and a time limit.",
		Capabilities: []ext.Capability{ext.CapabilityStatus, ext.CapabilityActions, ext.CapabilityUsers, ext.CapabilityValidate},
		Settings: []ext.SettingsSection{{ID: SectionRunners, Title: "Your runners", Scope: "user",
			Description: "Agent sessions the host starts for you, when the operator allows it.", Form: runnersForm}},
	}, nil
}

// Configure implements [ext.Extension]: it reads the config, revokes the
// tokens a previous run of the extension left alive (a crash), and starts
// the schedules and resource watchers.
func (e *Extension) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	cfg, bad, err := ParseConfig(req.Config)
	if err != nil {
		return err
	}
	ua, _ := req.Host.(ext.UserActor)
	e.mu.Lock()
	if e.cfg != nil {
		e.mu.Unlock()
		return errors.New("ext-runner is configured already")
	}
	e.host, e.ua, e.cfg, e.publicURL = req.Host, ua, cfg, req.PublicURL
	e.slots = make(chan struct{}, cfg.MaxProcesses)
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.runners = map[string]*runnerState{}
	for name, r := range cfg.Runners {
		rs := &runnerState{name: name, cfg: r, err: bad[name]}
		if r != nil {
			rs.user = r.User
			rs.profile = cfg.Profiles[r.Profile]
			if rs.err == nil && r.Disabled {
				rs.err = errors.New("disabled by the operator")
			}
		}
		if rs.err == nil && e.publicURL == "" {
			rs.err = errors.New("the host serves no /mcp (no public URL) for the agent to reach")
		}
		e.runners[runnerKey(rs.user, name)] = rs
	}
	e.mu.Unlock()

	if ua != nil {
		e.reapLedger(ctx)
	}
	e.openCgroups()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, rs := range e.runners {
		if rs.err != nil {
			e.log.Warn("runner off", "runner", rs.name, "user", rs.user, "reason", rs.err)
			continue
		}
		if ua == nil {
			rs.err = errors.New("the operator has not granted ext-runner actAsUsers: true in its entry, which it needs to mint its sessions' tokens")
			continue
		}
		e.startTriggersLocked(rs)
	}
	return nil
}

// openCgroups opens the sessions' cgroup tree (killing what a crash left
// in it), or says loudly why there is none: without it an agent's child
// that calls setsid survives the kill at the time limit. The tree is named
// after the host's public URL: one per host, the same after a restart.
func (e *Extension) openCgroups() {
	var err error
	if e.cg, err = openCgroupTree(treeName(e.publicURL)); err != nil {
		e.cgErr = fmt.Errorf("agents run without a cgroup, contained by their process group only (a child that calls setsid survives the kill): %w", err)
		e.log.Warn("agent sessions without cgroups", "err", e.cgErr)
	}
}

// startTriggersLocked starts rs's schedule and resource watcher, under a
// context of rs's own (stopped when its user replaces their runners, or
// at shutdown); e.mu is held.
func (e *Extension) startTriggersLocked(rs *runnerState) {
	ctx, cancel := context.WithCancel(e.ctx)
	rs.stop = cancel
	if rs.cfg.schedule != nil {
		e.wg.Add(1)
		go e.scheduleLoop(ctx, rs)
	}
	if rs.cfg.Resource != nil {
		e.wg.Add(1)
		go e.watchResource(ctx, rs)
	}
}

// Shutdown implements [ext.Extension]: sessions are cancelled (their
// agents killed, their tokens revoked) and waited for.
func (e *Extension) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if e.closed || e.cancel == nil {
		e.closed = true
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.cancel()
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		if e.cg != nil {
			e.cg.Tidy()
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ext-runner shutdown: sessions still ending: %w", ctx.Err())
	}
}

// Trigger asks for a session of the runner named name of user (the
// operator's runners have their user in the config). It starts one when
// the runner has room, else queues one (at most one pending), and says
// which.
func (e *Extension) Trigger(user, name, why string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := e.runners[runnerKey(user, name)]
	if rs == nil {
		return "", fmt.Errorf("runner %q of user %q: %w", name, user, ext.ErrNotFound)
	}
	if rs.err != nil {
		return "", fmt.Errorf("runner %q is off: %s: %w", name, rs.err, ext.ErrUnavailable)
	}
	if e.closed {
		return "", fmt.Errorf("ext-runner is shutting down: %w", ext.ErrUnavailable)
	}
	if rs.running < rs.cfg.Concurrency {
		e.startLocked(rs, why)
		return "started", nil
	}
	if rs.pending {
		return "already queued", nil
	}
	rs.pending = true
	return "queued", nil
}

// startLocked starts a session of rs; e.mu is held.
func (e *Extension) startLocked(rs *runnerState, why string) {
	rs.running++
	rs.waiting++
	out := &tail{max: OutputTail}
	rs.current = append(rs.current, out)
	spec := &sessionSpec{runner: rs.name, user: rs.user, cfg: rs.cfg, profile: rs.profile, publicURL: e.publicURL}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		var run Run
		select {
		case e.slots <- struct{}{}:
			e.mu.Lock()
			rs.waiting--
			e.mu.Unlock()
			e.log.Info("runner session started", "runner", rs.name, "user", rs.user, "trigger", why)
			run = e.runSession(e.ctx, spec, out)
			<-e.slots
		case <-e.ctx.Done():
			e.mu.Lock()
			rs.waiting--
			e.mu.Unlock()
			run = Run{Start: time.Now(), ExitCode: -1, Ended: EndedCancelled, Error: "ext-runner shut down before a slot was free"}
		}
		run.Trigger = why
		e.log.Info("runner session ended", "runner", rs.name, "user", rs.user, "ended", run.Ended, "exit", run.ExitCode, "duration", run.Duration)
		e.finish(rs, out, run)
	}()
}

// finish records run and starts the pending session, if any.
func (e *Extension) finish(rs *runnerState, out *tail, run Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs.running--
	rs.current = slices.DeleteFunc(rs.current, func(t *tail) bool { return t == out })
	rs.runs = append([]Run{run}, rs.runs...)
	if len(rs.runs) > keptRuns {
		rs.runs = rs.runs[:keptRuns]
	}
	if rs.pending && !e.closed {
		rs.pending = false
		e.startLocked(rs, "queued")
	}
}

// scheduleLoop triggers rs at its schedule's times until shutdown.
func (e *Extension) scheduleLoop(ctx context.Context, rs *runnerState) {
	defer e.wg.Done()
	for {
		now := time.Now()
		next := rs.cfg.schedule.Next(now)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if r, err := e.Trigger(rs.user, rs.name, "schedule"); err != nil {
			e.log.Warn("runner schedule", "runner", rs.name, "err", err)
		} else {
			e.log.Debug("runner schedule", "runner", rs.name, "result", r)
		}
	}
}

// Status implements [ext.StatusReporter]: a line per runner of user (every
// runner for ""), with the actions the user may ask for.
func (e *Extension) Status(_ context.Context, user string) ([]ext.StatusEntry, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ext.StatusEntry
	for _, k := range slices.Sorted(maps.Keys(e.runners)) {
		rs := e.runners[k]
		if user != "" && rs.user != user {
			continue
		}
		st := ext.StatusEntry{User: rs.user, Name: rs.name}
		switch {
		case rs.err != nil:
			st.State, st.Reason = "off", rs.err.Error()
		case rs.running > rs.waiting:
			st.State = "running"
		case rs.running > 0:
			st.State = "waiting for a slot"
		default:
			st.State = "idle"
		}
		if rs.err == nil {
			st.Actions = []string{ActionRun}
		}
		st.Detail = rs.detail()
		out = append(out, st)
	}
	return out, nil
}

// detail is the status's text for rs: queue, triggers, last runs and the
// tail of their output. e.mu is held.
func (rs *runnerState) detail() string {
	var b strings.Builder
	if rs.cfg != nil {
		fmt.Fprintf(&b, "scope: %s; profile %s; time limit %v; sessions %d/%d", rs.cfg.scope(), rs.cfg.Profile, rs.cfg.timeLimit, rs.running, rs.cfg.Concurrency)
		if rs.pending {
			b.WriteString("; 1 queued")
		}
		if rs.cfg.Schedule != "" {
			fmt.Fprintf(&b, "; schedule %s", rs.cfg.Schedule)
		}
		if rs.cfg.Resource != nil {
			fmt.Fprintf(&b, "; on changes of %s %s", rs.cfg.Resource.Server, rs.cfg.Resource.URI)
			if rs.watch != "" {
				fmt.Fprintf(&b, " (%s)", rs.watch)
			}
		}
		b.WriteString("\n")
	}
	for _, r := range rs.runs {
		fmt.Fprintf(&b, "run %s by %s: %s after %v", r.Start.UTC().Format(time.RFC3339), r.Trigger, r.Ended, r.Duration)
		if r.ExitCode >= 0 {
			fmt.Fprintf(&b, " (exit status %d)", r.ExitCode)
		}
		if r.Error != "" {
			fmt.Fprintf(&b, ": %s", r.Error)
		}
		if r.Uncontained != "" {
			fmt.Fprintf(&b, "; NO CGROUP, process group only: %s", r.Uncontained)
		}
		b.WriteString("\n")
		if r.Output != "" {
			o := r.Output
			if len(o) > 2048 {
				o = "…" + o[len(o)-2048:]
			}
			b.WriteString("  output: " + strings.ReplaceAll(strings.TrimRight(o, "\n"), "\n", "\n  ") + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// Runs returns the runner's finished runs, newest first (for tests and
// embedding hosts).
func (e *Extension) Runs(user, name string) []Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	if rs := e.runners[runnerKey(user, name)]; rs != nil {
		return slices.Clone(rs.runs)
	}
	return nil
}

// RunAction implements [ext.ActionRunner]: "run" on a runner queues a
// session of it. The host has checked that the caller may act on the
// entry (its user, or the operator).
func (e *Extension) RunAction(_ context.Context, req *ext.ActionRequest) (string, error) {
	if req.Action != ActionRun {
		return "", fmt.Errorf("action %q: ext-runner has only %q: %w", req.Action, ActionRun, ext.ErrNotFound)
	}
	by := "run now"
	if req.Caller == ext.OperatorUser {
		by = "run now (operator)"
	}
	return e.Trigger(req.User, req.Name, by)
}

// mint mints a token and records it in the ledger first-thing after.
func (e *Extension) mint(ctx context.Context, user, name string, scope *ext.Scope, expires time.Time) (*ext.MintedToken, error) {
	tok, err := e.ua.MintUserToken(ctx, &ext.MintTokenRequest{User: user, Name: name, Scope: scope, Expires: expires})
	if err != nil {
		return nil, err
	}
	e.ledger(func(ids map[string]time.Time) { ids[tok.ID] = expires })
	return tok, nil
}

// revoke revokes a token minted here and drops it from the ledger; it
// uses a context of its own, so that a session's end (its context done)
// still revokes. reason (how the session ended) goes to the host's audit
// record of the revocation.
func (e *Extension) revoke(id, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = ext.WithRevokeReason(ctx, reason)
	if err := e.ua.RevokeUserToken(ctx, id); err != nil {
		e.log.Warn("revoking a runner token failed; it stays in the ledger and is revoked at the next start (or expires)", "token", id, "err", err)
		return
	}
	e.ledger(func(ids map[string]time.Time) { delete(ids, id) })
}

// ledger applies f to the ledger of live tokens (ID → expiry), kept in
// the operator's secrets of this extension.
func (e *Extension) ledger(f func(map[string]time.Time)) {
	e.ledgerMu.Lock()
	defer e.ledgerMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sec := e.host.UserStore(ext.OperatorUser).Secrets()
	ids := map[string]time.Time{}
	if v, err := sec.Get(ctx, ledgerSecret); err == nil {
		_ = json.Unmarshal([]byte(v), &ids)
	}
	f(ids)
	for id, exp := range ids {
		if time.Now().After(exp) {
			delete(ids, id)
		}
	}
	b, _ := json.Marshal(ids)
	if err := sec.Set(ctx, ledgerSecret, string(b)); err != nil {
		e.log.Warn("writing the runner's token ledger failed", "err", err)
	}
}

// reapLedger revokes every token the ledger lists: at start, none of them
// belongs to a live session (a crash left them).
func (e *Extension) reapLedger(ctx context.Context) {
	var ids []string
	e.ledger(func(m map[string]time.Time) { ids = slices.Collect(maps.Keys(m)) })
	for _, id := range ids {
		if err := e.ua.RevokeUserToken(ext.WithRevokeReason(ctx, "session ended: ext-runner stopped without revoking it (a crash)"), id); err != nil && !errors.Is(err, ext.ErrNotFound) {
			e.log.Warn("revoking a token a previous run left", "token", id, "err", err)
			continue
		}
		e.log.Info("revoked a token a previous run of ext-runner left alive", "token", id)
		e.ledger(func(m map[string]time.Time) { delete(m, id) })
	}
}
