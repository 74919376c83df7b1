package extmcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/netguard"
	"github.com/agenthost/agenthost/ext/repeatlog"
)

// Version is the extension's version: a release build sets it with
// -ldflags "-X github.com/agenthost/agenthost/ext-mcp.Version=v1.2.3"
// (make build does, from the git tag).
var Version = "v0.1.0"

// OperatorUser is the reserved user ID whose store holds the operator's
// credentials for shared servers: the secret token:S of this user is lent
// to the users of shared server S. The host maps its operator scope (the
// CLI's `secret set --operator`) to this ID. No call, activation or
// service start is ever made in its name.
const OperatorUser = ext.OperatorUser

// The settings sections and fields.
const (
	// SectionServers is the "MCP servers" section: one switch per server,
	// named after it, and one secret token:S per personal server.
	SectionServers = "servers"
	// SectionUserServers is the "Your MCP servers" section, offered when
	// the policy is not none.
	SectionUserServers = "user-servers"
	// UserServersField is the field of SectionUserServers that holds the
	// user's server list, as JSON text.
	UserServersField = "servers"
)

// TokenSecret is the name of the secret that holds a user's token for
// server: "token:" + server.
func TokenSecret(server string) string { return "token:" + server }

// Options configures an [Extension]. The zero value gives the defaults.
type Options struct {
	// Logger receives the extension's logs (default: [ext.Logger]).
	Logger *slog.Logger
	// Telemetry exports a client span per tool call to a server and the
	// mcp.client.operation.duration histogram over OTLP/HTTP when the
	// process's environment names an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT);
	// the command sets it.
	Telemetry bool
	// Catalog tunes the catalog engine (timeouts, backoff); nil gives its
	// defaults.
	Catalog *catalog.Options
	// DefaultProtocolVersion overrides [DefaultProtocolVersion];
	// ProtocolLatest lets go-sdk negotiate.
	DefaultProtocolVersion string
	_                      struct{}
}

// Extension is the MCP extension: it keeps each user's catalog of MCP
// servers (package catalog) and connects to them with go-sdk. It
// implements [ext.Extension], [ext.ToolCaller], [ext.UserLifecycle],
// [ext.ServiceProvider] and [ext.StatusReporter]; all its methods are safe
// for concurrent use.
type Extension struct {
	log             *slog.Logger
	catalogOpts     *catalog.Options
	defaultProtocol string
	key             []byte     // keys the credential identities in fingerprints
	tel             *telemetry // nil: off
	// repeats collapses the warnings of servers that fail for many users
	// at every retry (closed at Shutdown).
	repeats *repeatlog.Log

	// life ends when Shutdown starts; the goroutines of spawn (sign-ins,
	// refreshes after a sign-in changed) run under it and bg joins them.
	life  context.Context
	stop  context.CancelFunc
	bgMu  sync.Mutex
	bg    sync.WaitGroup
	oauth oauthState

	// reconfMu serializes Reconfigure.
	reconfMu sync.Mutex

	mu        sync.Mutex
	baseDir   string // the operator's file's folder
	name      string // the name the host knows the extension by
	publicURL string // the host's, for sign-in links
	host      ext.Host
	cfg       *Config
	planner   *catalog.SettingsPlanner
	engine    *catalog.Engine
	conn      *connector // the engine's: its transports' idle pools are closed with it
	sections  []ext.SettingsSection
	shut      bool

	// groups are each user's groups as their last activation carried
	// them (ext.UserGroups), for allowlists naming "group:NAME"; guarded
	// by groupsMu (read by the planner under the engine's locks).
	groupsMu sync.Mutex
	groups   map[string][]string
}

// Compile-time guards.
var (
	_ ext.Extension         = (*Extension)(nil)
	_ ext.ToolCaller        = (*Extension)(nil)
	_ ext.UserLifecycle     = (*Extension)(nil)
	_ ext.ServiceProvider   = (*Extension)(nil)
	_ ext.StatusReporter    = (*Extension)(nil)
	_ ext.PromptProvider    = (*Extension)(nil)
	_ ext.ResourceProvider  = (*Extension)(nil)
	_ ext.Completer         = (*Extension)(nil)
	_ ext.TaskHandler       = (*Extension)(nil)
	_ ext.SessionListener   = (*Extension)(nil)
	_ ext.SettingsValidator = (*Extension)(nil)
	_ ext.Authorizer        = (*Extension)(nil)
	_ ext.Reconfigurer      = (*Extension)(nil)
)

// New returns the extension; opts may be nil. New starts nothing.
func New(opts *Options) *Extension {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = ext.Logger()
	}
	x := &Extension{
		log:             o.Logger,
		catalogOpts:     o.Catalog,
		defaultProtocol: o.DefaultProtocolVersion,
		key:             make([]byte, 32),
	}
	x.life, x.stop = context.WithCancel(context.Background())
	var window time.Duration
	if o.Catalog != nil {
		window = o.Catalog.RepeatWindow
	}
	x.repeats = repeatlog.New(x.log, window)
	if o.Telemetry {
		tel, err := newTelemetry(x.life)
		if err != nil {
			x.log.Warn("ext-mcp: telemetry is off", "err", err)
		}
		x.tel = tel
	}
	switch x.defaultProtocol {
	case "":
		x.defaultProtocol = DefaultProtocolVersion
	case ProtocolLatest:
		x.defaultProtocol = ""
	}
	if _, err := rand.Read(x.key); err != nil {
		panic(fmt.Sprintf("extmcp: reading random bytes: %v", err)) // never fails on supported platforms
	}
	return x
}

// Describe implements [ext.Extension]. Its settings sections reflect the
// config once Configure has run; before, the "MCP servers" form is empty.
func (x *Extension) Describe(context.Context) (*ext.Descriptor, error) {
	x.mu.Lock()
	sections, cfg := x.sections, x.cfg
	x.mu.Unlock()
	caps := []ext.Capability{ext.CapabilityTools, ext.CapabilityUsers,
		ext.CapabilityServices, ext.CapabilityStatus, ext.CapabilityPrompts, ext.CapabilityResources,
		ext.CapabilityCompletions, ext.CapabilityTasks, ext.CapabilitySessions, ext.CapabilityAuth, ext.CapabilityValidate, ext.CapabilityReconfigure,
		ext.CapabilitySnapshot}
	if cfg.sandboxes() {
		// The host then refuses to start the extension where it cannot
		// sandbox (unless its operator accepted the risk).
		caps = append(caps, ext.CapabilitySandbox)
	}
	if sections == nil {
		var err error
		if sections, err = buildSections(&Config{}); err != nil {
			return nil, err
		}
	}
	return &ext.Descriptor{
		Name:         "mcp",
		Version:      Version,
		Description:  "MCP servers as tools: a per-user catalog of the operator's servers and the users' own.",
		Capabilities: caps,
		Settings:     sections,
	}, nil
}

// Configure implements [ext.Extension]: it validates the config (an error
// names every bad field, and the host refuses to start the extension) and
// starts a fresh catalog. Configuring again replaces the catalog: the
// users active in the old one are activated in the new one, then the old
// one drains and closes.
func (x *Extension) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	if req == nil || req.Host == nil {
		return fmt.Errorf("extmcp: Configure without a host: %w", ext.ErrInvalidArgument)
	}
	cfg, err := parseConfig(req.Config, req.BaseDir, true)
	if err != nil {
		return fmt.Errorf("invalid MCP config: %w", err)
	}
	x.warnSharedPaths(cfg, req.BaseDir)
	sections, err := buildSections(cfg)
	if err != nil {
		return err
	}
	planner := x.newPlanner(cfg)
	h := req.Host
	opts := x.catalogOpts
	if opts == nil {
		opts = &catalog.Options{}
	}
	o := *opts
	if o.Logger == nil {
		o.Logger = x.log
	}
	maxResult := cfg.MaxResultBytes
	if maxResult == 0 {
		maxResult = DefaultMaxResultBytes
	}
	conn := &connector{x: x, guard: newGuard(ctx, cfg, req, x.log), maxResult: maxResult}
	// The publisher adds the sign-in entries of the servers that wait
	// (signinentry.go); it reads the engine's status, so it learns the
	// engine once it is made (before any user is activated on it).
	var engineRef atomic.Pointer[catalog.Engine]
	// The engine plans with the current planner: a reload (Reconfigure)
	// swaps it in place.
	engine := catalog.New(catalog.PlannerFunc(x.plan), conn, x.signInPublisher(h, engineRef.Load), &o)
	engineRef.Store(engine)

	x.mu.Lock()
	if x.shut {
		x.mu.Unlock()
		_ = engine.Close(ctx)
		return fmt.Errorf("extmcp: Configure after Shutdown: %w", ext.ErrUnavailable)
	}
	old, oldConn := x.engine, x.conn
	x.host, x.cfg, x.planner, x.engine, x.conn, x.sections = h, cfg, planner, engine, conn, sections
	x.baseDir = req.BaseDir
	x.name, x.publicURL = req.Name, strings.TrimRight(req.PublicURL, "/")
	if x.name == "" {
		x.name = "mcp"
	}
	x.mu.Unlock()
	if old == nil {
		return nil
	}
	defer oldConn.guard.closeIdle()
	// A new config: the users active under the old one move over (their
	// servers are planned afresh), then the old catalog drains and closes.
	var g errgroup.Group
	g.SetLimit(8)
	for _, u := range old.Users() {
		g.Go(func() error {
			if err := engine.Activate(ctx, u); err != nil {
				x.log.Warn("extmcp: re-activating a user under the new config failed", "user", u, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait() // a user that failed is logged; the others moved over
	return old.Close(ctx)
}

// newPlanner is the planner of cfg's servers.
func (x *Extension) newPlanner(cfg *Config) *catalog.SettingsPlanner {
	var decls []catalog.ServerDecl
	cfg.each(func(name string, s Server) { decls = append(decls, decl(name, cfg.withDefaults(s), false)) })
	return &catalog.SettingsPlanner{
		Servers:     decls,
		UserServers: cfg.UserServers,
		Toggles:     x.toggles,
		OwnServers: func(ctx context.Context, user string) (json.RawMessage, error) {
			return x.ownServers(ctx, user, cfg.Catalog)
		},
		ParseOwnServers: x.parseOwn(cfg.Catalog, cfg.Pin),
		Credential:      x.credentialFor,
		Groups:          x.userGroups,
	}
}

// plan plans user's servers with the current planner.
func (x *Extension) plan(ctx context.Context, user string) (catalog.Plan, error) {
	x.mu.Lock()
	p := x.planner
	x.mu.Unlock()
	return p.Plan(ctx, user)
}

// Reconfigure implements [ext.Reconfigurer]: the operator reloaded the
// host's file. The servers, the catalog and userServers change in place:
// every active user's set is planned afresh, so added servers connect,
// removed or changed ones drain through the catalog's retire path (calls
// in flight finish), untouched connections stay, and each user whose
// tools changed gets a new catalog (the host tells their open sessions
// tools/list_changed). The fields the connections are built with
// (userServerAllowCIDRs, userServerAllowHTTP, maxResultBytes, sandbox)
// cannot change in place: Reconfigure then fails with
// [ext.ErrUnimplemented] naming them, and the host restarts the
// extension. Reconfigure calls are serialized.
func (x *Extension) Reconfigure(ctx context.Context, req *ext.ReconfigureRequest) error {
	x.reconfMu.Lock()
	defer x.reconfMu.Unlock()
	x.mu.Lock()
	base, old, e := x.baseDir, x.cfg, x.engine
	x.mu.Unlock()
	if e == nil {
		return fmt.Errorf("extmcp: Reconfigure before Configure: %w", ext.ErrInvalidArgument)
	}
	cfg, err := parseConfig(req.Config, base, true)
	if err != nil {
		return fmt.Errorf("invalid MCP config: %w", err)
	}
	sections, err := buildSections(cfg)
	if err != nil {
		return err
	}
	if fields := notInPlace(old, cfg); len(fields) > 0 {
		return fmt.Errorf("extmcp: %s cannot change in place (the connections are built with it): %w", strings.Join(fields, ", "), ext.ErrUnimplemented)
	}
	if req.DryRun {
		return nil
	}
	x.warnSharedPaths(cfg, base)
	planner := x.newPlanner(cfg)
	x.mu.Lock()
	if x.shut {
		x.mu.Unlock()
		return fmt.Errorf("extmcp: Reconfigure after Shutdown: %w", ext.ErrUnavailable)
	}
	x.cfg, x.planner, x.sections = cfg, planner, sections
	x.mu.Unlock()
	added, removed, changed := diffServers(old, cfg)
	x.log.Info("extmcp: reconfigured in place", "added", added, "removed", removed, "changed", changed)
	if err := e.ReconcileAll(ctx); err != nil {
		// The config is in place; a user whose refresh failed is planned
		// again on their next activity or retry.
		x.log.Warn("extmcp: refreshing users under the new config failed", "error", err)
	}
	return nil
}

// notInPlace names the fields of the config that differ between old and
// cfg and cannot change in place.
func notInPlace(old, cfg *Config) []string {
	var out []string
	if !slices.Equal(old.UserServerAllowCIDRs, cfg.UserServerAllowCIDRs) {
		out = append(out, "userServerAllowCIDRs")
	}
	if old.UserServerAllowHTTP != cfg.UserServerAllowHTTP {
		out = append(out, "userServerAllowHTTP")
	}
	if old.MaxResultBytes != cfg.MaxResultBytes {
		out = append(out, "maxResultBytes")
	}
	if old.sandboxes() != cfg.sandboxes() {
		out = append(out, "sandbox")
	}
	return out
}

// diffServers names the operator's servers cfg adds, removes and changes
// compared with old.
func diffServers(old, cfg *Config) (added, removed, changed []string) {
	before := map[string]string{}
	old.each(func(name string, s Server) { before[name] = decl(name, old.withDefaults(s), false).Fingerprint })
	cfg.each(func(name string, s Server) {
		fp, ok := before[name]
		switch {
		case !ok:
			added = append(added, name)
		case fp != decl(name, cfg.withDefaults(s), false).Fingerprint:
			changed = append(changed, name)
		}
		delete(before, name)
	})
	for name := range before {
		removed = append(removed, name)
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	return added, removed, changed
}

// Shutdown implements [ext.Extension]: the catalog drains (until ctx ends)
// and closes every connection. It is idempotent and safe before Configure.
func (x *Extension) Shutdown(ctx context.Context) error {
	x.mu.Lock()
	x.shut = true
	e, conn := x.engine, x.conn
	x.mu.Unlock()
	var err error
	if e != nil {
		err = e.Close(ctx)
		conn.guard.closeIdle()
	}
	// Sign-ins waiting for a browser end; the refreshes they started are
	// joined.
	x.bgMu.Lock()
	x.stop()
	x.bgMu.Unlock()
	x.bg.Wait()
	x.repeats.Close()
	return errors.Join(err, x.tel.close(ctx))
}

// oauthClient returns the client of the OAuth requests (discovery,
// registration, tokens, refresh) of a user's own server (own) or of the
// operator's server at serverURL: they dial through netguard's users'
// policy (loopback, private and link-local addresses refused unless
// userServerAllowCIDRs opens them), except an operator's server's own
// host, which they reach as its connections do (guard.oauthTransport); no
// server's reach the host itself. Redirects follow netguard's rules, each
// hop dialed so; each request is bounded.
func (x *Extension) oauthClient(own bool, serverURL string) *http.Client {
	x.mu.Lock()
	c := x.conn
	x.mu.Unlock()
	strict := (&netguard.Policy{}).Client(30 * time.Second)
	if c == nil {
		return strict // not configured: refuse everything internal
	}
	return &http.Client{Transport: c.guard.oauthTransport(own, serverURL), Timeout: 30 * time.Second, CheckRedirect: strict.CheckRedirect}
}

// state returns the configured host, planner and engine.
func (x *Extension) state() (ext.Host, *catalog.SettingsPlanner, *catalog.Engine, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.shut:
		return nil, nil, nil, fmt.Errorf("extmcp: shut down: %w", ext.ErrUnavailable)
	case x.engine == nil:
		return nil, nil, nil, fmt.Errorf("extmcp: not configured: %w", ext.ErrUnavailable)
	}
	return x.host, x.planner, x.engine, nil
}

func (x *Extension) hostRef() (ext.Host, error) {
	h, _, _, err := x.state()
	return h, err
}

// checkUser refuses calls without an identifiable user, and in the
// operator's name.
func checkUser(user string) error {
	switch user {
	case "":
		return fmt.Errorf("caller not identified: %w", ext.ErrPermission)
	case OperatorUser:
		return fmt.Errorf("%q is reserved for the operator's credentials: %w", OperatorUser, ext.ErrPermission)
	}
	return nil
}

// CallTool implements [ext.ToolCaller]. A call without an identifiable user
// is refused before anything is looked up or read. A call that failed
// because its server waits for the user to sign in fails, for a client
// that declared URL-mode elicitation, with the error that asks it to
// show the sign-in link (see signInRequired).
func (x *Extension) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	if req == nil {
		return nil, fmt.Errorf("extmcp: nil request: %w", ext.ErrInvalidArgument)
	}
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	_, _, e, err := x.state()
	if err != nil {
		return nil, err
	}
	var mark *signInMark
	if caps := ext.SessionOf(req.Session).Capabilities(); bytes.Contains(caps, []byte(`"url"`)) && ext.URLElicitation(caps) {
		mark = new(signInMark)
		ctx = context.WithValue(ctx, signInMarkKey{}, mark)
	}
	res, err := e.Call(ctx, req)
	if mark != nil && err == nil && res != nil && res.IsError {
		if serr := x.signInRequired(e, req, mark.Load()); serr != nil {
			return nil, serr
		}
	}
	return res, err
}

// Activate implements [ext.UserLifecycle]: it activates or refreshes the
// user's catalog. A shared server the user switched on but is not lent
// stays off (its status says why), its switch is turned back off, and
// Activate then fails with [ext.ErrInvalidArgument] naming it, so the
// settings write that switched it on is refused.
func (x *Extension) Activate(ctx context.Context, user string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	h, planner, e, err := x.state()
	if err != nil {
		return err
	}
	x.setUserGroups(user, ext.UserGroups(ctx))
	// With the host's snapshot, this activation's plan reads no setting
	// or secret of the user back through the host (snapshot.go).
	ctx = withSnapshot(ctx, user, ext.ActivationSnapshot(ctx))
	if err := e.Activate(ctx, user); err != nil {
		return err
	}
	return x.refuseNotLent(ctx, h, planner, user)
}

// setUserGroups records user's groups from their activation.
func (x *Extension) setUserGroups(user string, groups []string) {
	x.groupsMu.Lock()
	defer x.groupsMu.Unlock()
	if x.groups == nil {
		x.groups = map[string][]string{}
	}
	if len(groups) == 0 {
		delete(x.groups, user)
		return
	}
	x.groups[user] = groups
}

// userGroups returns user's groups as their last activation carried them.
func (x *Extension) userGroups(user string) []string {
	x.groupsMu.Lock()
	defer x.groupsMu.Unlock()
	return x.groups[user]
}

// refuseNotLent turns off the switches of shared servers user is not lent.
// ValidateSettings refuses switching them on; this catches the switches
// stored before (the operator lent the server to fewer users since).
func (x *Extension) refuseNotLent(ctx context.Context, h ext.Host, planner *catalog.SettingsPlanner, user string) error {
	if !withholdsAny(planner, user) {
		return nil // nothing to refuse: no read
	}
	raw, err := readSetting(ctx, h, user, SectionServers)
	if err != nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil // the planner reported what it could not read
	}
	var toggles map[string]json.RawMessage
	if json.Unmarshal(raw, &toggles) != nil {
		return nil // idem
	}
	refused := notLentOn(planner, user, toggles)
	if len(refused) == 0 {
		return nil
	}
	for _, name := range refused {
		delete(toggles, name)
	}
	b, err := json.Marshal(toggles)
	if err == nil {
		err = h.UserStore(user).Settings().Set(ctx, SectionServers, b)
	}
	if err != nil {
		return fmt.Errorf("turning off the switches of shared servers %q, which user %q is not lent: %w", refused, user, err)
	}
	return notLentError(refused)
}

// ValidateSettings implements [ext.SettingsValidator]: a user's "MCP
// servers" values that switch on a shared server the operator does not
// lend them are refused, naming it, before anything is stored, whether
// or not the user is active.
func (x *Extension) ValidateSettings(ctx context.Context, req *ext.ValidateSettingsRequest) error {
	if req != nil && strings.HasPrefix(req.Section, SectionCatalogPrefix) {
		if err := checkUser(req.User); err != nil {
			return err
		}
		return x.validateCatalog(ctx, req.User, req.Section, req.Values)
	}
	if req == nil || req.Section != SectionServers {
		return nil
	}
	if err := checkUser(req.User); err != nil {
		return err
	}
	// The host sends the user's groups with the check, active or not.
	x.setUserGroups(req.User, ext.UserGroups(ctx))
	x.mu.Lock()
	planner := x.planner
	x.mu.Unlock()
	if planner == nil || !withholdsAny(planner, req.User) {
		return nil
	}
	var toggles map[string]json.RawMessage
	if err := json.Unmarshal(req.Values, &toggles); err != nil {
		return ext.Mark(fmt.Errorf("the values of the MCP servers section are not a JSON object: %w", err), ext.ErrInvalidArgument)
	}
	if refused := notLentOn(planner, req.User, toggles); len(refused) > 0 {
		return notLentError(refused)
	}
	return nil
}

// withholdsAny reports whether some shared server is not lent to user.
func withholdsAny(planner *catalog.SettingsPlanner, user string) bool {
	return slices.ContainsFunc(planner.Servers, func(d catalog.ServerDecl) bool {
		return !planner.Lent(d, user)
	})
}

// notLentOn returns the shared servers that toggles switch on and the
// operator does not lend user, in the config's order.
func notLentOn(planner *catalog.SettingsPlanner, user string, toggles map[string]json.RawMessage) []string {
	var refused []string
	for _, d := range planner.Servers {
		if !planner.Lent(d, user) &&
			bytes.Equal(bytes.TrimSpace(toggles[d.Name]), []byte("true")) {
			refused = append(refused, d.Name)
		}
	}
	return refused
}

// notLentError is the refusal of switching on shared servers not lent.
func notLentError(refused []string) error {
	return ext.Mark(fmt.Errorf("shared server %q is lent by the operator to some users only, and not to you: it stays off",
		strings.Join(refused, `", "`)), ext.ErrInvalidArgument)
}

// Retire implements [ext.UserLifecycle]: it withdraws one server of the
// user (until the next refresh), or, with an empty name, the whole
// catalog of the user.
func (x *Extension) Retire(ctx context.Context, user, name string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	_, _, e, err := x.state()
	if err != nil {
		return err
	}
	if name == "" {
		err := e.Deactivate(ctx, user)
		x.forgetSources(user)
		// The user's connections are gone: do not keep their idle
		// keep-alive sockets (others' idle ones reconnect on demand).
		x.mu.Lock()
		conn := x.conn
		x.mu.Unlock()
		conn.guard.closeIdle()
		return err
	}
	return e.Retire(ctx, user, name)
}

// ReconcileAll implements [ext.UserLifecycle].
func (x *Extension) ReconcileAll(ctx context.Context) error {
	_, _, e, err := x.state()
	if err != nil {
		return err
	}
	return e.ReconcileAll(ctx)
}

// Status implements [ext.StatusReporter].
func (x *Extension) Status(_ context.Context, user string) ([]ext.StatusEntry, error) {
	_, _, e, err := x.state()
	if err != nil {
		return nil, err
	}
	return e.Status(user), nil
}

// serviceName names a server's process. Its spec is OneSession, so the
// host never hands a new MCP session a process that already served one (a
// stdio server speaks one session per process) and stops it when the
// connection closes.
func (x *Extension) serviceName(server string) string {
	return server
}

// StartService implements [ext.ServiceProvider]: the process of a stdio
// server for one user, or nil when the user may not use it (unknown,
// switched off, not on a shared server's allowlist, not allowed by the
// policy). The environment is the configured one without any
// MCP_ACCESS_TOKEN on personal servers, plus MCP_ACCESS_TOKEN set to the
// user's token (the operator's, on shared servers) when there is one.
func (x *Extension) StartService(ctx context.Context, name, user string) (*ext.ProcessSpec, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	h, planner, _, err := x.state()
	if err != nil {
		return nil, err
	}
	server, _, _ := strings.Cut(name, "#")
	// The plan reads the user's credentials once and binds them to it.
	plan, err := planner.Plan(ctx, user)
	if err != nil {
		return nil, err
	}
	for _, d := range plan.Servers {
		if d.Name == server && !d.Remote {
			us, err := x.bound(ctx, h, user, d)
			if err != nil {
				return nil, err
			}
			return x.processSpec(ctx, h, d.Name, user, us)
		}
	}
	return nil, nil
}

// processSpec is how to start stdio server name for user, bound by us:
// the configured environment without any MCP_ACCESS_TOKEN on personal
// servers, plus MCP_ACCESS_TOKEN set to the user's token (the operator's,
// on shared servers) when there is one; the placeholders of args, env and
// cwd replaced by the user's (placeholders.go).
func (x *Extension) processSpec(ctx context.Context, h ext.Host, name, user string, us *userSpec) (*ext.ProcessSpec, error) {
	if err := us.needsInputs(name); err != nil {
		return nil, err
	}
	s := us.server
	own := catalog.IsUserServer(name)
	sandboxed := own || (s.Sandbox != nil && *s.Sandbox)
	var dir string
	if usesUserDir(s) {
		var err error
		if dir, err = userDir(ctx, h, user, sandboxed); err != nil {
			return nil, err
		}
	}
	env := make([]string, 0, len(s.Env)+1)
	for _, k := range sortedKeys(s.Env) {
		if k == "MCP_ACCESS_TOKEN" && us.replace {
			continue
		}
		// A catalog server's secret inputs are put in last: a secret is
		// text, never a placeholder.
		env = append(env, k+"="+withSecrets(expand(s.Env[k], user, dir), us.inputs))
	}
	if us.token != "" {
		env = append(env, "MCP_ACCESS_TOKEN="+us.token)
	}
	args := make([]string, len(s.Args))
	for i, a := range s.Args {
		args[i] = expand(a, user, dir)
	}
	command, cwd := s.Command, expand(s.Cwd, user, dir)
	var readable []string
	if !own {
		// The operator's relative paths resolve against the config file's
		// folder; a bare command name is looked up on PATH.
		command, cwd = x.resolve(command, true), x.resolve(cwd, false)
		readable = append(readable, s.ReadablePaths...)
		if cwd != "" && (dir == "" || !under(filepath.Clean(cwd), dir)) {
			readable = append(readable, cwd) // the user's own folder is always shown
		}
	}
	// A sandboxed program named by its path must be visible to be run;
	// one looked up on PATH is in the system folders the sandbox shows. A
	// user's cwd is not shown to their sandbox: only their own folder.
	if filepath.IsAbs(command) {
		readable = append(readable, command)
	}
	return &ext.ProcessSpec{Command: command, Args: args,
		Env: env, Dir: cwd, OneSession: true, ReadablePaths: readable,
		Sandbox: sandboxed}, nil
}

// resolve returns an operator's path resolved against the config file's
// folder. A command without a separator is a name to look up on PATH and
// stays as written.
func (x *Extension) resolve(p string, command bool) string {
	x.mu.Lock()
	base := x.baseDir
	x.mu.Unlock()
	if p == "" || base == "" || filepath.IsAbs(p) {
		return p
	}
	if command && !strings.ContainsRune(p, filepath.Separator) && !strings.ContainsRune(p, '/') {
		return p
	}
	return filepath.Join(base, p)
}

// toggles reads the user's switches for the planner.
func (x *Extension) toggles(ctx context.Context, user string) (json.RawMessage, error) {
	h, err := x.hostRef()
	if err != nil {
		return nil, err
	}
	return readSetting(ctx, h, user, SectionServers)
}

// ownServers reads the user's own server list for the planner: the list
// they pasted, with the servers they added from the operator's catalog cat.
func (x *Extension) ownServers(ctx context.Context, user string, cat map[string]CatalogEntry) (json.RawMessage, error) {
	h, err := x.hostRef()
	if err != nil {
		return nil, err
	}
	pasted, err := x.pastedServers(ctx, user)
	if err != nil {
		return nil, err
	}
	if len(cat) == 0 {
		return pasted, nil
	}
	return x.withCatalog(ctx, h, user, pasted, cat)
}

// pastedServers reads the user's own server list as they pasted it (JSON
// text in a longtext field).
func (x *Extension) pastedServers(ctx context.Context, user string) (json.RawMessage, error) {
	h, err := x.hostRef()
	if err != nil {
		return nil, err
	}
	raw, err := readSetting(ctx, h, user, SectionUserServers)
	if err != nil {
		return nil, err
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(raw, &values); err != nil {
		return json.RawMessage(`"your settings are not a JSON object"`), nil // fails to parse, with a reason
	}
	field := values[UserServersField]
	var text string
	if err := json.Unmarshal(field, &text); err == nil {
		return json.RawMessage(text), nil
	}
	return field, nil // stored as JSON rather than text
}

// parseOwn returns the planner's parser for the user's own servers. The
// servers [Extension.withCatalog] added from the catalog cat are named
// under the key [Extension.catalogTag], which it removes: their specs
// carry their entry, whose secret inputs are read when the user's
// credential is bound ([Extension.ownerSpec]). The key is secret to this
// process, so a pasted list cannot claim a catalog entry's secrets.
func (x *Extension) parseOwn(cat map[string]CatalogEntry, pin ext.PinMode) func(json.RawMessage) ([]catalog.ServerDecl, error) {
	tag := x.catalogTag()
	return func(raw json.RawMessage) ([]catalog.ServerDecl, error) {
		var fromCatalog []string
		var top map[string]json.RawMessage
		if json.Unmarshal(raw, &top) == nil && top[tag] != nil {
			if err := json.Unmarshal(top[tag], &fromCatalog); err != nil {
				return nil, fmt.Errorf("the catalog servers of the list: %w", err)
			}
			delete(top, tag)
			b, err := json.Marshal(top)
			if err != nil {
				return nil, err
			}
			raw = b
		}
		list, err := ParseServerList(raw)
		if err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				return nil, ce
			}
			return nil, err
		}
		var out []catalog.ServerDecl
		list.each(func(name string, s Server) {
			if s.Pin == "" {
				s.Pin = pin // the operator's default
			}
			d := decl(catalog.UserServerName(name), s, true)
			if e, ok := cat[name]; ok && slices.Contains(fromCatalog, name) {
				d.Spec.(*spec).entry = &e
			}
			d.Name = name // the planner adds the prefix
			out = append(out, d)
		})
		return out, nil
	}
}

// catalogTag is the key under which [Extension.withCatalog] names the
// servers it added to a user's own list: unguessable, and the same for
// the life of this process.
func (x *Extension) catalogTag() string {
	m := hmac.New(sha256.New, x.key)
	m.Write([]byte("catalog servers"))
	return "x-agenthost-catalog-" + hex.EncodeToString(m.Sum(nil)[:12])
}

// userSpec is a server's spec bound to the credential one user uses on it,
// read once while planning; the connector and StartService take the
// token from here instead of reading it again.
type userSpec struct {
	*spec
	owner   string // whose credential: the user, or OperatorUser
	token   string
	replace bool   // the token (or grant) replaces the configured credential
	grant   *grant // the OAuth grant, when there is no token
	// inputs are the secret inputs of a server added from the catalog
	// (other than its token), by input name; missing names the required
	// ones the user has not set.
	inputs  map[string]string
	missing [][2]string // input, secret name
}

// missingReason names the first required secret input the user has not
// set, or is "".
func (us *userSpec) missingReason() string {
	if len(us.missing) == 0 {
		return ""
	}
	return fmt.Sprintf("needs your secret input %q: set it in the server's section of your settings (it is stored as your secret %s)",
		us.missing[0][0], us.missing[0][1])
}

// needsInputs returns an error naming the first required secret input the
// user has not set, or nil. The planner leaves such a server out
// ([catalog.Credential.Missing]); this is the connector's own check.
func (us *userSpec) needsInputs(server string) error {
	if r := us.missingReason(); r != "" {
		return fmt.Errorf("MCP server %q %s: %w", server, r, ext.ErrInvalidArgument)
	}
	return nil
}

// secretValues are the secret values us sends: the token and the
// catalog's secret inputs, for redaction.
func (us *userSpec) secretValues() []string {
	var out []string
	if us.token != "" {
		out = append(out, us.token)
	}
	for _, k := range sortedKeys(us.inputs) {
		if v := us.inputs[k]; v != "" {
			out = append(out, v)
		}
	}
	return out
}

// credentialFor is the planner's [catalog.SettingsPlanner.Credential]: it
// reads the credential user would use on d and binds it to the plan. The
// identity is an HMAC under a key that lives as long as this process, so
// it names the credential without revealing it.
func (x *Extension) credentialFor(ctx context.Context, user string, d catalog.ServerDecl) (catalog.Credential, error) {
	h, err := x.hostRef()
	if err != nil {
		return catalog.Credential{}, err
	}
	us, err := x.bound(ctx, h, user, d)
	if err != nil {
		return catalog.Credential{}, err
	}
	if r := us.missingReason(); r != "" {
		// Not planned: its status says what is missing; setting it
		// plans it again.
		return catalog.Credential{Missing: r}, nil
	}
	id := "none"
	switch {
	case us.token != "" || len(us.inputs) > 0:
		m := hmac.New(sha256.New, x.key)
		m.Write([]byte(us.token))
		for _, k := range sortedKeys(us.inputs) {
			m.Write([]byte("\x00" + k + "=" + us.inputs[k]))
		}
		id = hex.EncodeToString(m.Sum(nil)[:12])
		if us.token == "" && us.grant != nil {
			id += "/" + x.credentialID(us.grant)
		}
	case us.grant != nil:
		id = x.credentialID(us.grant)
	case !us.replace:
		id = "configured"
	}
	return catalog.Credential{ID: id, Spec: us}, nil
}

// bound returns d's spec bound to user's credential: as planned, or read
// now when d comes from elsewhere.
func (x *Extension) bound(ctx context.Context, h ext.Host, user string, d catalog.ServerDecl) (*userSpec, error) {
	if sp, ok := d.Spec.(*userSpec); ok {
		return sp, nil
	}
	owner, err := ownerOf(user, x.userGroups(user), d)
	if err != nil {
		return nil, err
	}
	return x.ownerSpec(ctx, h, owner, d)
}
