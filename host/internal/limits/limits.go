// Package limits is the host's rate limits on tool calls: per user, per
// server and per tool (globs), calls per minute (a token bucket,
// golang.org/x/time/rate) and concurrent calls, with defaults and
// overrides per user or group. A call over a limit is refused at once,
// never queued, with a [*Refusal] that says when to try again.
//
// Every user has their own state (buckets, counts of calls in flight)
// behind their own mutex, found in a sync.Map: one user's calls never wait
// for another's, and no lock is shared by all users on the call path. A
// user's state unused for the idle time, with no call in flight and full
// buckets (so dropping it gives nothing back), is dropped by Sweep, which
// the owner calls (the Limiter starts no goroutine).
//
// A *Limiter is safe for concurrent use; a nil *Limiter limits nothing.
package limits

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/agenthost/agenthost/ext"
)

// Limit bounds calls. A zero field does not limit.
type Limit struct {
	// PerMinute is the calls per minute, refilled evenly (a token bucket).
	PerMinute float64 `json:"perMinute,omitempty"`
	// Burst is the bucket's size: the calls that may come at once after a
	// quiet spell (default PerMinute, rounded up, at least 1).
	Burst int `json:"burst,omitempty"`
	// Concurrent is the calls that may run at the same time.
	Concurrent int `json:"concurrent,omitempty"`
}

// IsZero reports whether l limits nothing.
func (l Limit) IsZero() bool { return l.PerMinute == 0 && l.Concurrent == 0 }

func (l Limit) burst() int {
	if l.Burst > 0 {
		return l.Burst
	}
	return max(1, int(math.Ceil(l.PerMinute)))
}

// looser is the more generous of a and b in each field (0, no limit, is
// the most generous).
func looser(a, b Limit) Limit {
	loose := func(x, y float64) float64 {
		if x == 0 || y == 0 {
			return 0
		}
		return max(x, y)
	}
	out := Limit{PerMinute: loose(a.PerMinute, b.PerMinute), Concurrent: int(loose(float64(a.Concurrent), float64(b.Concurrent)))}
	if out.PerMinute != 0 {
		out.Burst = max(a.burst(), b.burst())
	}
	return out
}

// Set is a set of limits: on each user's calls together, and on each
// user's calls to each server and of each tool matched by a glob.
type Set struct {
	// User bounds all of a user's calls together (nil: no limit, or in
	// an override, the default's).
	User *Limit `json:"user,omitempty"`
	// Servers bounds a user's calls to each server whose name the key,
	// a path.Match glob, matches (each server its own bucket).
	Servers map[string]Limit `json:"servers,omitempty"`
	// Tools bounds a user's calls of each tool ("server/tool") the key,
	// a path.Match glob, matches (each tool its own bucket).
	Tools map[string]Limit `json:"tools,omitempty"`
}

// Config is the operator's limits.
type Config struct {
	Set
	// Overrides replace the limits above for a user (key: the user ID)
	// or the members of a group (key: "group:NAME"), limit by limit (the
	// user key, and each server and tool glob). A user's own entry wins
	// over their groups'; among groups, the most generous value of each
	// field.
	Overrides map[string]Set `json:"overrides,omitempty"`
	// IdleMinutes drops the state of a user unused that long (default 10).
	IdleMinutes float64 `json:"idleMinutes,omitempty"`
}

// IsZero reports whether c limits nothing.
func (c *Config) IsZero() bool {
	return c == nil || (c.User == nil && len(c.Servers) == 0 && len(c.Tools) == 0 && len(c.Overrides) == 0)
}

// Validate checks c; errors name the field, under prefix ("limits").
func (c *Config) Validate(prefix string) error {
	var errs []error
	check := func(field string, l Limit) {
		if l.PerMinute < 0 || math.IsNaN(l.PerMinute) || math.IsInf(l.PerMinute, 0) {
			errs = append(errs, fmt.Errorf("%s.perMinute: %v is not a number ≥ 0", field, l.PerMinute))
		}
		if l.Burst < 0 {
			errs = append(errs, fmt.Errorf("%s.burst: must not be negative", field))
		}
		if l.Burst > 0 && l.PerMinute == 0 {
			errs = append(errs, fmt.Errorf("%s.burst: needs perMinute", field))
		}
		if l.Concurrent < 0 {
			errs = append(errs, fmt.Errorf("%s.concurrent: must not be negative", field))
		}
	}
	globs := func(field string, m map[string]Limit, wantSlash bool) {
		for _, k := range slices.Sorted(mapKeys(m)) {
			if _, err := path.Match(k, ""); err != nil || k == "" {
				errs = append(errs, fmt.Errorf("%s[%q]: not a glob (path.Match)", field, k))
			} else if wantSlash != strings.Contains(k, "/") {
				if wantSlash {
					errs = append(errs, fmt.Errorf("%s[%q]: a tool glob is over \"server/tool\" (such as \"notes/*\")", field, k))
				} else {
					errs = append(errs, fmt.Errorf("%s[%q]: a server glob has no \"/\" (tools go under tools)", field, k))
				}
			}
			check(fmt.Sprintf("%s[%q]", field, k), m[k])
		}
	}
	set := func(p string, s Set) {
		if s.User != nil {
			check(p+".user", *s.User)
		}
		globs(p+".servers", s.Servers, false)
		globs(p+".tools", s.Tools, true)
	}
	set(prefix, c.Set)
	for _, k := range slices.Sorted(mapKeys(c.Overrides)) {
		who := strings.TrimPrefix(k, "group:")
		if who == "" || strings.ContainsAny(who, "\x00/") {
			errs = append(errs, fmt.Errorf("%s.overrides[%q]: want a user ID or group:NAME", prefix, k))
			continue
		}
		set(fmt.Sprintf("%s.overrides[%q]", prefix, k), c.Overrides[k])
	}
	if c.IdleMinutes < 0 {
		errs = append(errs, fmt.Errorf("%s.idleMinutes: must not be negative", prefix))
	}
	return errors.Join(errs...)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Scopes of a limit.
const (
	ScopeUser   = "user"
	ScopeServer = "server"
	ScopeTool   = "tool"
)

// Kinds of a limit.
const (
	KindRate        = "rate"
	KindConcurrency = "concurrency"
)

// CodeRateLimited is the JSON-RPC error code of a tools/call refused by a
// limit on /mcp (in the implementation-defined server error range,
// -32000 to -32099; 29 for HTTP's 429). Its data is [Refusal.Data].
const CodeRateLimited = -32029

// ErrLimited is what every [*Refusal] matches, beside [ext.ErrBusy].
var ErrLimited = errors.New("rate limit")

// ConcurrencyRetry is the retry hint of a refusal by a concurrency limit:
// the host cannot know when a call in flight ends.
const ConcurrencyRetry = time.Second

// Refusal is a call refused by a limit. It matches [ErrLimited] and
// [ext.ErrBusy] (so it crosses the extension boundary as "busy").
type Refusal struct {
	// Scope is ScopeUser, ScopeServer or ScopeTool; Kind KindRate or
	// KindConcurrency.
	Scope, Kind string
	// Subject is the server or tool limited ("" for the user scope).
	Subject string
	// Limit words the limit ("60 calls per minute", "2 concurrent calls").
	Limit string
	// RetryAfter is when a call may succeed again: exact for a rate,
	// [ConcurrencyRetry] for concurrency.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	var of string
	switch r.Scope {
	case ScopeUser:
		of = "of yours"
	case ScopeServer:
		of = fmt.Sprintf("to server %q", r.Subject)
	default:
		of = fmt.Sprintf("of tool %q", r.Subject)
	}
	if r.Kind == KindConcurrency {
		return fmt.Sprintf("rate limit: at most %s %s; try again when one ends (in about %s)", r.Limit, of, r.RetryAfter)
	}
	return fmt.Sprintf("rate limit: at most %s %s; try again in %s", r.Limit, of, r.RetryAfter)
}

// Unwrap makes a refusal match ErrLimited and ext.ErrBusy.
func (r *Refusal) Unwrap() []error { return []error{ErrLimited, ext.ErrBusy} }

// RetryAfterMs is RetryAfter in whole milliseconds, rounded up.
func (r *Refusal) RetryAfterMs() int64 {
	return int64((r.RetryAfter + time.Millisecond - 1) / time.Millisecond)
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up (at least
// 1): an HTTP Retry-After.
func (r *Refusal) RetryAfterSeconds() int {
	return max(1, int((r.RetryAfter+time.Second-1)/time.Second))
}

// Data is the JSON-RPC error's data of the refusal: {"retryAfterMs": N,
// "limit": "60 calls per minute", "scope": "user|server|tool", "kind":
// "rate|concurrency"}, and "server" or "tool" naming the one limited.
func (r *Refusal) Data() map[string]any {
	d := map[string]any{"retryAfterMs": r.RetryAfterMs(), "limit": r.Limit, "scope": r.Scope, "kind": r.Kind}
	if r.Subject != "" {
		d[r.Scope] = r.Subject
	}
	return d
}

// Label is the refusal's limit kind for metrics: scope and kind, such as
// "tool_concurrency" (never a user, server or tool name).
func (r *Refusal) Label() string { return r.Scope + "_" + r.Kind }

// Labels are every value of [Refusal.Label].
var Labels = []string{"user_rate", "user_concurrency", "server_rate", "server_concurrency", "tool_rate", "tool_concurrency"}

// Options are a Limiter's hooks.
type Options struct {
	// Groups returns a user's groups, when the user's state is made (nil:
	// none). It may take locks: it is not called on every call.
	Groups func(user string) []string
	// Now is the clock (nil: time.Now); for tests.
	Now func() time.Time
}

// Limiter applies a Config; [Limiter.Reconfigure] gives it a new one in
// place. Safe for concurrent use: the config is read under cmu (never
// held with a user's lock taken first), each user's state under its own
// mutex.
type Limiter struct {
	cmu     sync.RWMutex
	cfg     Config
	idle    time.Duration
	groups  func(string) []string
	now     func() time.Time
	on      atomic.Bool   // the config limits something: Acquire looks
	gen     atomic.Uint64 // the config's generation: Reconfigure adds one
	users   sync.Map      // user → *userState
	refused [6]atomic.Int64
}

// New returns a Limiter for cfg; nil when cfg limits nothing.
func New(cfg *Config, opts *Options) *Limiter {
	if cfg.IsZero() {
		return nil
	}
	return newLimiter(cfg, opts)
}

func newLimiter(cfg *Config, opts *Options) *Limiter {
	l := &Limiter{now: time.Now}
	l.cfg, l.idle = *cfg, idleOf(cfg)
	l.on.Store(!cfg.IsZero())
	if opts != nil {
		l.groups = opts.Groups
		if opts.Now != nil {
			l.now = opts.Now
		}
	}
	return l
}

func idleOf(cfg *Config) time.Duration {
	if d := time.Duration(cfg.IdleMinutes * float64(time.Minute)); d > 0 {
		return d
	}
	return 10 * time.Minute
}

// NewReloadable returns a Limiter for cfg that is never nil, so that a
// reload may give it limits later ([Limiter.Reconfigure]); with a zero
// cfg it admits every call.
func NewReloadable(cfg *Config, opts *Options) *Limiter {
	return newLimiter(cfg, opts)
}

// Reconfigure makes cfg the limits in place. Every user's state is
// resolved again against it: a limit that is unchanged keeps its bucket
// as it is; a changed one keeps its bucket's tokens (capped at the new
// burst) at the new rate and its count of calls in flight; a limit that
// is new starts full. The calls in flight finish as they started (and,
// when the limiter had no limits at all before, are not counted against
// a new concurrency limit).
func (l *Limiter) Reconfigure(cfg *Config) {
	if l == nil {
		return
	}
	l.cmu.Lock()
	l.cfg, l.idle = *cfg, idleOf(cfg)
	l.on.Store(!cfg.IsZero())
	l.gen.Add(1) // with the config: a state resolved before sees it changed
	l.cmu.Unlock()
	now := l.now()
	l.users.Range(func(k, v any) bool {
		l.retuneUser(k.(string), v.(*userState), now)
		return true
	})
}

// retuneUser resolves us, user's state, against the config in place (see
// [Limiter.Reconfigure]). Resolving the same config twice changes
// nothing.
func (l *Limiter) retuneUser(user string, us *userState, now time.Time) {
	gen := l.gen.Load()
	pol := l.resolve(user) // before us.mu: it may take the host's locks
	us.mu.Lock()
	defer us.mu.Unlock()
	us.pol = pol
	switch {
	case us.user != nil:
		us.user.retune(pol.user, now)
	case !pol.user.IsZero():
		us.user = newGate(pol.user, ScopeUser, "", now)
		us.user.inflight = us.inflight
	}
	for server, g := range us.servers {
		lim, _ := match(pol.servers, server)
		g.retune(lim, now)
	}
	for tool, g := range us.tools {
		lim, _ := match(pol.tools, tool)
		g.retune(lim, now)
	}
	us.gen.Store(gen)
}

// retune gives g the limit lim in place (see [Limiter.Reconfigure]).
func (g *gate) retune(lim Limit, now time.Time) {
	if g.limit == lim {
		return
	}
	g.limit = lim
	switch {
	case lim.PerMinute <= 0:
		g.bucket = nil
	case g.bucket == nil:
		g.bucket = newGate(lim, g.scope, g.subject, now).bucket
	default:
		g.bucket.SetLimitAt(now, rate.Limit(lim.PerMinute/60))
		g.bucket.SetBurstAt(now, lim.burst())
		if tokens := g.bucket.TokensAt(now); tokens > float64(lim.burst()) {
			g.bucket.AllowN(now, int(tokens)-lim.burst()) // cap at the new burst
		}
	}
}

// userState is one user's limiters. mu guards everything in it.
type userState struct {
	gen      atomic.Uint64 // the config generation its limits were resolved in
	mu       sync.Mutex
	dead     bool // dropped by Sweep: look the user up again
	pol      policy
	user     *gate
	servers  map[string]*gate // every server called; a zero limit: none
	tools    map[string]*gate
	inflight int
	last     time.Time
}

// gate is one limit's state.
type gate struct {
	limit    Limit
	scope    string
	subject  string
	bucket   *rate.Limiter // nil: no rate
	inflight int
}

// rule is a glob and its limit.
type rule struct {
	glob  string
	limit Limit
}

// policy is the limits that apply to one user.
type policy struct {
	user           Limit
	servers, tools []rule // most specific first
}

func (l *Limiter) resolve(user string) policy {
	var groups []string
	if l.groups != nil {
		groups = l.groups(user)
	}
	l.cmu.RLock()
	defer l.cmu.RUnlock()
	eff := Set{User: l.cfg.User, Servers: map[string]Limit{}, Tools: map[string]Limit{}}
	for k, v := range l.cfg.Servers {
		eff.Servers[k] = v
	}
	for k, v := range l.cfg.Tools {
		eff.Tools[k] = v
	}
	// Groups: the most generous of the user's groups', field by field.
	var fromGroups Set
	for _, g := range groups {
		o, ok := l.cfg.Overrides["group:"+g]
		if !ok {
			continue
		}
		if o.User != nil {
			u := *o.User
			if fromGroups.User != nil {
				u = looser(*fromGroups.User, u)
			}
			fromGroups.User = &u
		}
		merge := func(dst *map[string]Limit, src map[string]Limit) {
			for k, v := range src {
				if *dst == nil {
					*dst = map[string]Limit{}
				}
				if old, ok := (*dst)[k]; ok {
					v = looser(old, v)
				}
				(*dst)[k] = v
			}
		}
		merge(&fromGroups.Servers, o.Servers)
		merge(&fromGroups.Tools, o.Tools)
	}
	apply := func(o Set) {
		if o.User != nil {
			eff.User = o.User
		}
		for k, v := range o.Servers {
			eff.Servers[k] = v
		}
		for k, v := range o.Tools {
			eff.Tools[k] = v
		}
	}
	apply(fromGroups)
	if o, ok := l.cfg.Overrides[user]; ok {
		apply(o)
	}
	var p policy
	if eff.User != nil {
		p.user = *eff.User
	}
	p.servers, p.tools = rules(eff.Servers), rules(eff.Tools)
	return p
}

// rules sorts globs most specific first: a name without wildcards, then
// longer globs, then by the glob itself.
func rules(m map[string]Limit) []rule {
	out := make([]rule, 0, len(m))
	for k, v := range m {
		out = append(out, rule{k, v})
	}
	literal := func(g string) bool { return !strings.ContainsAny(g, `*?[\`) }
	slices.SortFunc(out, func(a, b rule) int {
		if la, lb := literal(a.glob), literal(b.glob); la != lb {
			if la {
				return -1
			}
			return 1
		}
		if len(a.glob) != len(b.glob) {
			return len(b.glob) - len(a.glob)
		}
		return strings.Compare(a.glob, b.glob)
	})
	return out
}

func match(rs []rule, name string) (Limit, bool) {
	for _, r := range rs {
		if ok, _ := path.Match(r.glob, name); ok {
			return r.limit, !r.limit.IsZero()
		}
	}
	return Limit{}, false
}

func newGate(l Limit, scope, subject string, now time.Time) *gate {
	g := &gate{limit: l, scope: scope, subject: subject}
	if l.PerMinute > 0 {
		g.bucket = rate.NewLimiter(rate.Limit(l.PerMinute/60), l.burst())
		g.bucket.AllowN(now, 0) // start full at now
	}
	return g
}

// state returns user's state, locked, making it when it is not there.
func (l *Limiter) state(user string, now time.Time) *userState {
	for {
		v, ok := l.users.Load(user)
		if !ok {
			gen := l.gen.Load()
			pol := l.resolve(user)
			us := &userState{pol: pol, servers: map[string]*gate{}, tools: map[string]*gate{}, last: now}
			us.gen.Store(gen)
			if !pol.user.IsZero() {
				us.user = newGate(pol.user, ScopeUser, "", now)
			}
			if stateMade != nil {
				stateMade(user)
			}
			v, _ = l.users.LoadOrStore(user, us)
		}
		us := v.(*userState)
		if us.gen.Load() != l.gen.Load() {
			// A reload came between resolving this state's limits and
			// storing it, where Reconfigure's walk could not see it.
			l.retuneUser(user, us, now)
		}
		us.mu.Lock()
		if !us.dead {
			return us
		}
		us.mu.Unlock()
	}
}

// stateMade, when set (tests), is called after a new user state's limits
// are resolved and before it is stored.
var stateMade func(user string)

// Acquire admits a call of tool ("server/tool") by user, or refuses it
// with a [*Refusal]. An admitted call must call release when it ends.
func (l *Limiter) Acquire(user, tool string) (release func(), err error) {
	if l == nil || !l.on.Load() {
		return func() {}, nil
	}
	now := l.now()
	us := l.state(user, now)
	defer us.mu.Unlock()
	server := ext.ServerOf(tool)
	// A gate even without a limit: it counts the calls in flight, for a
	// concurrency limit a reload may add (Reconfigure).
	sg, ok := us.servers[server]
	if !ok {
		lim, _ := match(us.pol.servers, server)
		sg = newGate(lim, ScopeServer, server, now)
		us.servers[server] = sg
	}
	tg, ok := us.tools[tool]
	if !ok {
		lim, _ := match(us.pol.tools, tool)
		tg = newGate(lim, ScopeTool, tool, now)
		us.tools[tool] = tg
	}
	us.last = now
	gates := [3]*gate{us.user, sg, tg}
	for _, g := range gates {
		if g != nil && g.limit.Concurrent > 0 && g.inflight >= g.limit.Concurrent {
			return nil, l.refuse(&Refusal{Scope: g.scope, Kind: KindConcurrency, Subject: g.subject,
				Limit: plural(g.limit.Concurrent, "concurrent call"), RetryAfter: ConcurrencyRetry})
		}
	}
	// The buckets are only touched under us.mu: look at all, then take
	// from all, so a refused call takes nothing.
	for _, g := range gates {
		if g == nil || g.bucket == nil {
			continue
		}
		if tokens := g.bucket.TokensAt(now); tokens < 1 {
			wait := time.Duration((1 - tokens) / float64(g.bucket.Limit()) * float64(time.Second))
			return nil, l.refuse(&Refusal{Scope: g.scope, Kind: KindRate, Subject: g.subject,
				Limit: perMinute(g.limit.PerMinute), RetryAfter: max(wait, time.Millisecond)})
		}
	}
	for _, g := range gates {
		if g != nil && g.bucket != nil {
			g.bucket.AllowN(now, 1)
		}
	}
	us.inflight++
	for _, g := range gates {
		if g != nil {
			g.inflight++
		}
	}
	return func() {
		us.mu.Lock()
		defer us.mu.Unlock()
		us.inflight--
		for _, g := range gates {
			if g != nil {
				g.inflight--
			}
		}
		us.last = l.now()
	}, nil
}

func (l *Limiter) refuse(r *Refusal) *Refusal {
	l.refused[slices.Index(Labels, r.Label())].Add(1)
	return r
}

// Refused returns the calls refused since the start, by [Refusal.Label].
func (l *Limiter) Refused() map[string]int64 {
	out := make(map[string]int64, len(Labels))
	for i, k := range Labels {
		if l != nil {
			out[k] = l.refused[i].Load()
		} else {
			out[k] = 0
		}
	}
	return out
}

// Forget drops user's state, so that their next call resolves their
// limits again (their groups changed). Calls in flight end on the old
// state.
func (l *Limiter) Forget(user string) {
	if l == nil {
		return
	}
	if v, ok := l.users.LoadAndDelete(user); ok {
		us := v.(*userState)
		us.mu.Lock()
		us.dead = true
		us.mu.Unlock()
	}
}

// Sweep drops the state of the users idle for the idle time, with no call
// in flight and every bucket full again (so nothing is forgiven), and
// returns how many it dropped.
func (l *Limiter) Sweep() int {
	if l == nil {
		return 0
	}
	now, idle := l.now(), l.Idle()
	n := 0
	l.users.Range(func(k, v any) bool {
		us := v.(*userState)
		us.mu.Lock()
		if us.inflight == 0 && now.Sub(us.last) >= idle && us.full(now) {
			us.dead = true
			l.users.Delete(k)
			n++
		}
		us.mu.Unlock()
		return true
	})
	return n
}

// Users is the number of users whose state is kept.
func (l *Limiter) Users() int {
	if l == nil {
		return 0
	}
	n := 0
	l.users.Range(func(any, any) bool { n++; return true })
	return n
}

// Idle is the idle time after which a user's state may be dropped.
func (l *Limiter) Idle() time.Duration {
	if l == nil {
		return 0
	}
	l.cmu.RLock()
	defer l.cmu.RUnlock()
	return l.idle
}

func (us *userState) full(now time.Time) bool {
	full := func(g *gate) bool {
		return g == nil || g.bucket == nil || g.bucket.TokensAt(now) >= float64(g.bucket.Burst())
	}
	if !full(us.user) {
		return false
	}
	for _, g := range us.servers {
		if !full(g) {
			return false
		}
	}
	for _, g := range us.tools {
		if !full(g) {
			return false
		}
	}
	return true
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func perMinute(n float64) string {
	if n == 1 {
		return "1 call per minute"
	}
	return fmt.Sprintf("%g calls per minute", n)
}
