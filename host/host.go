package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/audit"
	"github.com/agenthost/agenthost/host/internal/limits"
	"github.com/agenthost/agenthost/host/internal/pins"
	"github.com/agenthost/agenthost/host/internal/services"
	"github.com/agenthost/agenthost/host/internal/supervisor"
	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/settings"
)

// Version is the host's version: a release build sets it with
// -ldflags "-X github.com/agenthost/agenthost/host.Version=v1.2.3";
// otherwise it is what the Go toolchain stamped (the module's version, or
// "dev" in a workspace). [Build] tells the commit and its date too.
var Version = "dev"

// InProcess is an extension that runs as a Go value inside the host
// (embedding, tests): no process, no restart.
type InProcess struct {
	Extension ext.Extension
	// Config is the extension's config block.
	Config json.RawMessage
	// ActAsUsers grants it [ext.UserActor], as
	// [ExtensionConfig.ActAsUsers] does for a configured one.
	ActAsUsers bool
}

// Options holds what a developer sets when embedding the host; all fields
// are optional.
type Options struct {
	// Logger receives the host's structured log (default: discard).
	Logger *slog.Logger
	// Extensions are in-process extensions by name, started beside those of
	// the config file.
	Extensions map[string]InProcess
	// DisableAutoMTLS turns off go-plugin's mutual TLS for extension
	// processes (benchmarks only: other local processes could then connect
	// to an extension's socket).
	DisableAutoMTLS bool
	// DisableFDPassing relays service bytes over gRPC instead of passing
	// descriptors (tests of both carriers).
	DisableFDPassing bool
	// DisableCallChannel carries calls to extension processes on a gRPC
	// stream instead of the socketpair call channel (tests of both
	// carriers, and the baseline of benchmarks).
	DisableCallChannel bool
	// Settings replaces the SQLite settings store (embedding, tests). The
	// host does not close it.
	Settings settings.Store
	// Secrets replaces the secrets store chosen by the config. The host
	// does not close it.
	Secrets secrets.Store
	// ServiceGrace is how long each step of stopping a service process
	// waits (close stdin, then SIGTERM, then SIGKILL; default 2 s).
	ServiceGrace time.Duration
	// ListenAddr is the address the host's HTTP surfaces are bound to,
	// for a caller that listened before New (agenthost serve does): with
	// port 0 in the config's listen, only the listener knows the port.
	// The host's config then reads it as its listen, and extensions are
	// told it ([ext.ConfigureRequest] ListenAddr, and PublicURL without a
	// publicURL), so that ext-mcp denies the host's own address to the
	// servers it connects. Empty: the config's listen.
	ListenAddr string
	_          struct{}
}

func minutes(v, def float64) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v * float64(time.Minute))
}

func seconds(v, def float64) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v * float64(time.Second))
}

// newServices is the manager of the host's per-user processes: records
// and cgroups kept per data folder (what a killed host left is reaped
// now), and a sandbox that hides the data folder (and the TLS key, and
// the operator's file with the secrets of the operator's servers) from
// untrusted ones, each user's in a folder of its own.
func newServices(cfg *Config, dataDir string, grace time.Duration, logger *slog.Logger) *services.Manager {
	sum := sha256.Sum256([]byte(dataDir))
	hide := []string{dataDir}
	if cfg.TLS.KeyFile != "" {
		hide = append(hide, cfg.Resolve(cfg.TLS.KeyFile))
	}
	if cfg.file != "" {
		hide = append(hide, cfg.file)
	}
	return services.New(services.Options{
		Idle:        minutes(cfg.Services.IdleMinutes, 10),
		Max:         cfg.Services.MaxProcesses,
		ConnectWait: seconds(cfg.Services.ConnectWaitSeconds, 10),
		Grace:       grace,
		Logger:      logger,
		RunDir:      filepath.Join(dataDir, "run", "services"),
		CgroupName:  "agenthost-" + hex.EncodeToString(sum[:6]),
		Sandbox: services.SandboxOptions{
			Hide:     hide,
			UIDFirst: cfg.Services.SandboxUIDs.First, UIDCount: cfg.Services.SandboxUIDs.Count,
			UIDFile: filepath.Join(dataDir, "sandbox-uids.json"),
			Home: func(k services.Key) string {
				return filepath.Join(dataDir, "users", k.User, k.Extension, "sandbox")
			},
			AllowUnsandboxed: cfg.Services.UnsafeSharedUID,
		},
	})
}

// ServiceProcess reports whether pid is one of the host's service
// processes or was started by one (even one that left its process group:
// the cgroup finds it), or is gone already (a peer that connected and
// exited, leaving the connection to a child, cannot be told apart). The
// control socket refuses such peers: a server, trusted or not, never
// administers the host.
func (h *Host) ServiceProcess(pid int) bool { return h.services.Owns(pid) }

// Host loads extensions and serves their tools to users. It is safe for
// concurrent use; Close stops every extension and waits for everything the
// host started.
type Host struct {
	cfg    *Config
	logger *slog.Logger
	reg    *registry
	extras *extras
	sess   *sessions
	exts   map[string]*extension
	start  time.Time

	// life ends when Close starts; activations run under it and are
	// joined by Close (acts).
	life   context.Context
	cancel context.CancelFunc
	acts   sync.WaitGroup

	mu     sync.Mutex
	active map[string]*activation
	convs  map[string]convBinding
	closed bool
	// Idle tracking (see idle.go): each active user's last activity, their
	// calls in flight, and the deactivations underway (a new activation
	// waits for its user's).
	seen  map[string]time.Time
	busy  map[string]int
	deact map[string]chan struct{}
	// disabled are the users refused until enabled, groups each user's
	// groups for their activations (users.go).
	disabled map[string]bool
	groups   map[string][]string
	userIdle time.Duration
	bg       sync.WaitGroup // the idle and slot watchers
	slots    *slotQueue     // users refused a service process slot (slots.go)

	minter      minter       // the store of the tokens extensions mint (actas.go)
	callers     callers      // the handles of in-flight tool calls (callers.go)
	callerTel   callerTel    // the telemetry of the calls made through them (callers.go)
	toolWatches []*toolWatch // the usertools watchers (usertools.go)
	settings    settings.Store
	secrets     secrets.Store
	secretsKind string
	ownStores   bool // the host opened the settings store and closes it
	ownSecrets  bool // the host opened the secrets store and closes it
	services    *services.Manager
	dataDir     string

	// settingsWrite serializes the writes of settings values: held only
	// around the store, never across a refresh or an extension call.
	settingsWrite sync.Mutex
	// userWrites serializes a user's own writes of one section (a patch
	// is a read, a merge, the extension's check and a write), per user
	// and section: a slow check holds up that section of that user only.
	userWrites keyedLock

	// approvals are the calls waiting for approval and the windows open
	// (policy.go); policyCount counts the policy's decisions.
	approvals   *approvals
	policyCount func(decision string)
	pol         atomic.Pointer[PolicyConfig] // the tool policy in force (policy.go, reload.go)
	inflight    [3]atomic.Int64              // calls running, by kind (queues.go)

	audit  *audit.Writer   // nil: the audit log is off (audit.go)
	limits *limits.Limiter // nil: no rate limits (limits.go)
	reload reloadState     // the operator's file as last (re)loaded (reload.go)
	fleet  fleet           // what of inactive users is not well (fleet.go)

	auditHashes audit.HashCache

	pins *pins.Manager // the tool pins (pins.go)

	closeOnce sync.Once
	closeErr  error
}

type activation struct {
	done chan struct{}
}

// validUser reports whether id has the shape of a user ID: 1-128 of
// A-Z a-z 0-9 . _ @ + -, starting with a letter or digit, so reserved IDs
// (such as the operator's, "@operator") can never collide. A loop, not a
// regexp: every call checks its user, and the regexp cost ~3 µs of each.
func validUser(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '@' || c == '+' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ValidUser reports whether id is a well-formed user ID.
func ValidUser(id string) bool { return validUser(id) }

func checkUser(user string) error {
	if !validUser(user) {
		return fmt.Errorf("user ID %q is not valid (want 1-128 of A-Z a-z 0-9 . _ @ + -, starting with a letter or digit): %w", user, ext.ErrInvalidArgument)
	}
	return nil
}

// New starts a host: it launches every enabled extension of cfg (in name
// order, in parallel) and the in-process ones of opts. ctx bounds the
// startup only. An extension that fails to start is reported in the error
// and the host does not start; nothing is left running.
func New(ctx context.Context, cfg *Config, opts *Options) (*Host, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := errors.Join(cfg.Policy.validate()...); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	loaded := cfg
	if o.ListenAddr != "" {
		c := *cfg
		c.Listen = o.ListenAddr
		cfg = &c
	}
	dataDir := cfg.DataPath()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data folder: %w", err)
	}
	h := &Host{
		cfg: cfg, logger: logger, reg: newRegistry(logger), extras: newExtras(), sess: newSessions(),
		exts:  map[string]*extension{},
		start: time.Now(), active: map[string]*activation{}, convs: map[string]convBinding{},
		seen: map[string]time.Time{}, busy: map[string]int{}, deact: map[string]chan struct{}{},
		disabled: map[string]bool{}, groups: map[string][]string{},
		userIdle: minutes(cfg.Services.IdleMinutes, 10), slots: newSlotQueue(),
		dataDir: dataDir, approvals: newApprovals(),
		services: newServices(cfg, dataDir, o.ServiceGrace, logger),
		reload:   reloadState{loaded: loaded},
	}
	h.life, h.cancel = context.WithCancel(context.Background())
	st, sec, kind, err := openStores(ctx, cfg, &o, dataDir)
	if err != nil {
		h.cancel()
		return nil, err
	}
	h.settings, h.secrets, h.secretsKind = st, sec, kind
	h.ownStores = o.Settings == nil
	h.ownSecrets = o.Secrets == nil
	logger.Info("stores opened", "secrets", kind)
	if err := openAudit(cfg, dataDir, h); err != nil {
		_ = h.Close()
		return nil, err
	}
	if err := openPins(dataDir, h); err != nil {
		_ = h.Close()
		return nil, err
	}
	h.openFleet(dataDir)
	h.pol.Store(cfg.Policy)
	// Never nil, so that a reload may add limits (reload.go).
	h.limits = limits.NewReloadable(&cfg.Limits, &limits.Options{Groups: h.UserGroups})
	inprocs := map[string]ext.Extension{}
	for name, ec := range cfg.Extensions {
		if ec.Disabled {
			continue
		}
		if ec.ActAsUsers {
			logger.Warn("extension granted actAsUsers: it may mint tokens for and call the tools of any user", "extension", name)
		}
		home := filepath.Join(dataDir, "extensions", name)
		if err := os.MkdirAll(home, 0o700); err != nil {
			_ = h.Close()
			return nil, fmt.Errorf("creating the folder of extension %q: %w", name, err)
		}
		env := make([]string, 0, len(ec.Env))
		for k, v := range ec.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		h.exts[name] = &extension{
			h: h, name: name, logger: logger.With("extension", name), config: ec.Config, actAsUsers: ec.ActAsUsers,
			spec: &supervisor.Spec{
				Name: name, Path: cfg.Resolve(ec.Path), Args: ec.Args, Env: env, SHA256: ec.SHA256,
				Home: home, DisableAutoMTLS: o.DisableAutoMTLS, FDPassing: !o.DisableFDPassing,
				DisableCallChannel: o.DisableCallChannel,
			},
		}
	}
	for name, ip := range o.Extensions {
		if _, dup := h.exts[name]; dup {
			_ = h.Close()
			return nil, fmt.Errorf("extension %q is both in the config file and in-process", name)
		}
		if ip.Extension == nil {
			_ = h.Close()
			return nil, fmt.Errorf("in-process extension %q is nil", name)
		}
		h.exts[name] = &extension{h: h, name: name, logger: logger.With("extension", name), config: ip.Config, actAsUsers: ip.ActAsUsers}
		inprocs[name] = ip.Extension
	}
	exts := sortedExtensions(h.exts)
	errs := make([]error, len(exts))
	var g errgroup.Group
	for i, e := range exts {
		g.Go(func() error {
			errs[i] = e.start(ctx, inprocs[e.name])
			return nil
		})
	}
	_ = g.Wait() // each extension's error is in errs, in name order
	if err := errors.Join(errs...); err != nil {
		_ = h.Close()
		return nil, err
	}
	h.bg.Add(2)
	go h.watchIdle()
	go h.watchSlots()
	h.startLimits()
	h.startToolWatchers()
	logger.Info("host started", "extensions", len(h.exts), "data", dataDir)
	return h, nil
}

// Close stops every extension (in reverse name order, each given 10 s to
// shut down) and waits for all their processes and goroutines. It is
// idempotent.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		// Activations in flight give up, and are waited for before their
		// extensions stop.
		h.cancel()
		h.bg.Wait()
		h.acts.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		exts := sortedExtensions(h.exts)
		var errs []error
		for i := len(exts) - 1; i >= 0; i-- {
			if err := exts[i].stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		// Extensions are gone, and with them their handles: stop the
		// service processes.
		if err := h.services.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := h.closeAudit(); err != nil {
			errs = append(errs, err)
		}
		if err := h.closePins(); err != nil {
			errs = append(errs, err)
		}
		if err := h.closeFleet(); err != nil {
			errs = append(errs, err)
		}
		if h.ownStores && h.settings != nil {
			if err := h.settings.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing the settings store: %w", err))
			}
		}
		if h.ownSecrets && h.secrets != nil {
			if err := h.secrets.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing the secrets store: %w", err))
			}
		}
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// Extensions describes every extension, by name. It never fails; the
// error is there for surfaces that reach a host over a connection.
func (h *Host) Extensions(context.Context) ([]ExtensionInfo, error) {
	return h.extensionInfos(), nil
}

func (h *Host) extensionInfos() []ExtensionInfo {
	exts := sortedExtensions(h.exts)
	out := make([]ExtensionInfo, len(exts))
	for i, e := range exts {
		out[i] = e.info()
	}
	return out
}

// Config returns the configuration the host was started with (an empty
// one when New was given nil). Do not change it.
func (h *Host) Config() *Config { return h.cfg }

// Uptime returns how long the host has run.
func (h *Host) Uptime() time.Duration { return time.Since(h.start) }

// Tools returns the user's tools, system and per-user, sorted by name. The
// first call for a user activates them in every extension that keeps
// per-user state.
func (h *Host) Tools(ctx context.Context, user string) ([]Tool, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	return h.visible(user, h.reg.list(user)), nil
}

// Call runs a tool for user. conversation, when set, is recorded as the
// user's (see [ext.Host.ActingUser]); a conversation that belongs to
// another user is refused. Arguments and results travel as raw JSON.
//
// The result may hold the whole MCP result object raw
// ([ext.CallToolResult.Raw], always so for out-of-process extensions): read
// it with its JSON and Fields methods. Use [Host.CallTool] to pass a client
// session, progress token or task parameters.
func (h *Host) Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error) {
	return h.CallTool(ctx, &CallRequest{User: user, Conversation: conversation, Name: name, Arguments: args})
}

// Subscribe returns a channel that receives a value (coalesced) whenever
// the user's tools change; user "" hears every change. The subscription
// ends when cancel is called or ctx ends, whichever comes first; call
// cancel when done either way.
func (h *Host) Subscribe(ctx context.Context, user string) (events <-chan struct{}, cancel func()) {
	events, unsub := h.reg.subscribe(user)
	stop := context.AfterFunc(ctx, unsub)
	return events, func() {
		stop()
		unsub()
	}
}

// convBinding is who a conversation belongs to, and the scope its first
// call carried (nil: none).
type convBinding struct {
	user  string
	scope *ext.Scope
}

// bindConversation records conversation as user's, with the scope of its
// first call. A later call in it from another user is refused, and so is
// one whose scope is not within the recorded one: an extension acting
// for a scoped caller in the caller's conversation ([ext.UserActor]) can
// never widen it, whatever scope it passes.
func (h *Host) bindConversation(user, conversation string, scope *ext.Scope) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.convs[conversation]; ok {
		if b.user != user {
			return fmt.Errorf("conversation %q belongs to another user: %w", conversation, ext.ErrPermission)
		}
		if !scope.Within(b.scope) {
			return fmt.Errorf("conversation %q is scoped to %s: a call in it must stay within that scope (got %s): %w",
				conversation, b.scope, scope, ext.ErrPermission)
		}
		return nil
	}
	if len(h.convs) >= maxConversations {
		// Forget an arbitrary old binding rather than grow without bound.
		for k := range h.convs {
			delete(h.convs, k)
			break
		}
	}
	h.convs[conversation] = convBinding{user: user, scope: scope.Clone()}
	return nil
}

const maxConversations = 100_000

func (h *Host) actingUser(conversation string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.convs[conversation]
	if !ok {
		return "", fmt.Errorf("conversation %q has no known user: %w", conversation, ext.ErrNotFound)
	}
	return b.user, nil
}

// activationTimeout bounds one user's activation across all extensions.
const activationTimeout = 60 * time.Second

// ensureActive activates user in every extension with the users
// capability, once; concurrent callers wait for the same activation, each
// as long as its own ctx allows. The activation belongs to all of them,
// not to the first caller: it runs on a goroutine of the host, under the
// host's lifetime (bounded by activationTimeout), goes on when a caller
// gives up, and is joined by Close. A failing extension is logged and
// does not block the others.
func (h *Host) ensureActive(ctx context.Context, user string) error {
	h.mu.Lock()
	for {
		if h.closed {
			h.mu.Unlock()
			return fmt.Errorf("the host is closed: %w", ext.ErrUnavailable)
		}
		if err := h.userDisabledLocked(user); err != nil {
			h.mu.Unlock()
			return err
		}
		ch, ok := h.deact[user]
		if !ok {
			break
		}
		// The user is being deactivated: activate again once that is over,
		// so that its retire cannot undo this activation.
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the deactivation of user %q: %w", user, ctx.Err())
		}
		h.mu.Lock()
	}
	h.seen[user] = time.Now()
	a, ok := h.active[user]
	if !ok {
		h.reg.wake(user)
		a = &activation{done: make(chan struct{})}
		h.active[user] = a
		h.acts.Add(1)
		go func() {
			defer h.acts.Done()
			defer close(a.done)
			actx, cancel := context.WithTimeout(h.life, activationTimeout)
			defer cancel()
			h.activateAll(actx, user)
			h.tellActivated(actx, user)
			// The idle clock counts from the end of the activation (or
			// from the last use, when later): one that took longer than
			// services.idleMinutes was idle already by the clock of its
			// start, and deactivated as soon as it ended.
			h.mu.Lock()
			if h.active[user] == a {
				h.seen[user] = time.Now()
			}
			h.mu.Unlock()
		}()
	}
	h.mu.Unlock()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the activation of user %q: %w", user, ctx.Err())
	}
}

// activateAll activates user in every extension that keeps per-user
// state, in parallel; a failure is logged and does not stop the others.
func (h *Host) activateAll(ctx context.Context, user string) {
	var g errgroup.Group
	for _, e := range sortedExtensions(h.exts) {
		if !e.descriptor().Has(ext.CapabilityUsers) {
			continue
		}
		g.Go(func() error {
			if err := h.activateOne(ctx, e, user); err != nil {
				e.logger.Error("activating user failed", "user", user, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}

func (h *Host) activateOne(ctx context.Context, e *extension, user string) error {
	return use(ctx, e, ext.CapabilityUsers, func() string { return "activating user " + user },
		func(ul ext.UserLifecycle) error { return ul.Activate(h.activationContext(ctx, e, user), user) })
}

// reactivate activates every active user again in e, 8 at a time, after
// a restart, and ends each one's mark of the crash (extension.crashed), on
// which their calls wait: users with a call waiting go first, then the
// others in name order. ctx is the extension's lifetime: stopping it ends
// this.
func (h *Host) reactivate(ctx context.Context, e *extension) {
	if !e.descriptor().Has(ext.CapabilityUsers) {
		return
	}
	users := h.ActiveUsers()
	pending := e.pendingReactivations()
	// A user marked at the crash and deactivated since is not re-activated:
	// their calls wait no more.
	for u, r := range pending {
		if _, ok := slices.BinarySearch(users, u); !ok {
			e.reactivated(u, r)
		}
	}
	var hurry chan string
	for _, r := range pending {
		hurry = r.hurry // one queue per crash
		break
	}
	var (
		mu    sync.Mutex
		taken = make(map[string]bool, len(users))
		next  int
	)
	pop := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		for {
			select {
			case u := <-hurry: // nil without a crash mark: never ready
				if _, active := slices.BinarySearch(users, u); active && !taken[u] {
					taken[u] = true
					return u, true
				}
				continue
			default:
			}
			break
		}
		for next < len(users) {
			u := users[next]
			next++
			if !taken[u] {
				taken[u] = true
				return u, true
			}
		}
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, activationTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for range min(8, len(users)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u, ok := pop(); ok; u, ok = pop() {
				if err := h.activateOne(ctx, e, u); err != nil {
					e.logger.Error("re-activating user after restart failed", "user", u, "error", err)
				}
				// The user's calls, held meanwhile, go on (after a failure
				// too: the extension then says what it can).
				if r := pending[u]; r != nil {
					e.reactivated(u, r)
				}
			}
		}()
	}
	wg.Wait() // failures are logged; the other users are active
}

// Deactivate retires everything of user in every extension that keeps
// per-user state (Retire with an empty name) and forgets the activation:
// the user's next Tools or Call activates them again (after this
// returns). The user sleeps meanwhile: their tools stay listed and their
// sessions hear no change. The host does it by itself for users idle for
// services.idleMinutes; call it for users you know went away, to free
// their connections and processes.
func (h *Host) Deactivate(ctx context.Context, user string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	h.mu.Lock()
	a, ok := h.active[user]
	if !ok {
		h.mu.Unlock()
		return nil
	}
	done := h.beginDeactivationLocked(user)
	h.mu.Unlock()
	return h.deactivate(ctx, user, a, done)
}

// beginDeactivationLocked forgets user's activation and marks the user as
// being deactivated until the returned channel is closed (by deactivate).
func (h *Host) beginDeactivationLocked(user string) chan struct{} {
	delete(h.active, user)
	delete(h.seen, user)
	done := make(chan struct{})
	h.deact[user] = done
	return done
}

// deactivate retires user, whose activation a was, in every extension,
// then ends the deactivation (done).
func (h *Host) deactivate(ctx context.Context, user string, a *activation, done chan struct{}) error {
	defer func() {
		h.mu.Lock()
		delete(h.deact, user)
		h.mu.Unlock()
		close(done)
	}()
	select {
	case <-a.done: // let a running activation finish first
	case <-ctx.Done():
		return ctx.Err()
	}
	// The user's tools stay listed while they sleep: their sessions hear
	// no change, which would only make them list again and wake the user.
	h.reg.sleep(user)
	// The fleet view keeps what of the user is not well (fleet.go).
	h.remember(ctx, user)
	var errs []error
	for _, e := range sortedExtensions(h.exts) {
		if !e.descriptor().Has(ext.CapabilityUsers) {
			continue
		}
		if err := use(ctx, e, ext.CapabilityUsers, func() string { return "retiring user " + user },
			func(ul ext.UserLifecycle) error { return ul.Retire(ctx, user, "") }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ActiveUsers returns the users activated so far, sorted.
func (h *Host) ActiveUsers() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.active))
	for u := range h.active {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// checkSections validates an extension's settings sections at registration.
func (h *Host) checkSections(name string, d *ext.Descriptor) error {
	seen := map[string]bool{}
	for _, s := range d.Settings {
		if s.ID == "" || seen[s.ID] {
			return fmt.Errorf("extension %q: settings section id %q is empty or repeated", name, s.ID)
		}
		seen[s.ID] = true
		if err := validateForm(s); err != nil {
			return fmt.Errorf("extension %q: settings section %q: %w", name, s.ID, err)
		}
	}
	return nil
}
