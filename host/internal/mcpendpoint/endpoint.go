package mcpendpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/guard"
	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// Host is what the endpoint needs from the host (*host.Host is one). Its
// methods are called concurrently.
type Host interface {
	api.Tools
	api.Caller
	// Subscribe returns a channel that receives a value (coalesced)
	// whenever the user's tools change, until cancel is called or ctx
	// ends.
	Subscribe(ctx context.Context, user string) (events <-chan struct{}, cancel func())
	// Task answers a tasks/* request (params and result raw).
	Task(ctx context.Context, user, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error)
	// Prompts returns the user's prompts, sorted by name.
	Prompts(ctx context.Context, user string) ([]api.Prompt, error)
	// GetPrompt renders a prompt (an MCP GetPromptResult, raw).
	GetPrompt(ctx context.Context, req *api.PromptRequest) (json.RawMessage, error)
	// Resources returns the user's resources and templates, sorted.
	Resources(ctx context.Context, user string) ([]api.Resource, []api.ResourceTemplate, error)
	// ReadResource reads a resource (an MCP ReadResourceResult, raw).
	ReadResource(ctx context.Context, req *api.ResourceRequest) (json.RawMessage, error)
	// SubscribeResource adds (or, with unsubscribe, removes) one
	// subscriber of a resource of user.
	SubscribeResource(ctx context.Context, user, uri string, unsubscribe bool) error
	// Complete answers completion/complete (params and result raw).
	Complete(ctx context.Context, user string, params json.RawMessage, sess ext.Session) (json.RawMessage, error)
	// Instructions returns the usage notes the extensions published for
	// user, sorted by extension and source.
	Instructions(ctx context.Context, user string) ([]api.Instruction, error)
	// SubscribeCatalog returns a channel that receives a value (coalesced)
	// whenever the user's prompts, resources, templates or instructions
	// change, until cancel is called.
	SubscribeCatalog(user string) (events <-chan struct{}, cancel func())
	// AttachSession registers an open session of user, so that the
	// extensions' notifications and requests for the user reach it; touch
	// marks it used, detach ends the registration.
	AttachSession(user string, s ext.Session) (touch, detach func())
	// SessionNotify passes a client's notification (roots/list_changed)
	// to the extensions.
	SessionNotify(ctx context.Context, user, method string, params json.RawMessage) error
}

// Principal is who a bearer token stands for.
type Principal struct {
	// User is the user ID every call of the session acts as.
	User string
	// TokenID identifies the token (never the token itself), so that
	// [Endpoint.CloseToken] can find the sessions it opened. For an OAuth
	// access token it is the grant's ID, which its refreshed tokens share:
	// a session outlives a refresh.
	TokenID string
	// Expires, when set, is when the token expires: the verification cache
	// never keeps it past then.
	Expires time.Time
	// Ends, when set, is when the token's sessions close (a host token's
	// expiry: the token can never be renewed). An OAuth access token sets
	// none: its refreshed tokens keep its sessions.
	Ends time.Time
	// Scope, when set, narrows what the token reaches (a scoped token's):
	// its sessions and stateless requests see and call only those tools,
	// prompts, resources and templates, as if the rest did not exist.
	Scope *ext.Scope
}

// Verifier checks bearer tokens. The endpoint calls Verify on every HTTP
// request, concurrently.
type Verifier interface {
	// Verify returns the principal of a valid token. An invalid, unknown,
	// expired or revoked token is any error; an error that wraps
	// [ErrUnavailable] means the verifier could not decide (its store is
	// down), and one that wraps [ErrExpired] a genuine token past its
	// expiry: neither is counted as a failed attempt.
	Verify(ctx context.Context, token string) (Principal, error)
}

// Limiter throttles failed attempts (the host's auth.Limiter is one). The
// endpoint checks a token first and calls Fail only after an invalid one,
// with the client's key ([Options.AddrKey]) and the token presented, so
// that a valid token is never refused because of others' failures. A
// non-nil error means the address or the token is locked out: the request
// gets 429 with the error's text (meant for the client) and, if the error
// has a method RetryAfterSeconds() int, a Retry-After header; nil means
// 401. Fail is called concurrently.
type Limiter interface {
	Fail(addr, credential string) error
}

// ErrUnavailable is wrapped by a [Verifier] error that means "cannot
// decide now" rather than "invalid token": the request fails with 503.
var ErrUnavailable = errors.New("mcpendpoint: verifier unavailable")

// ErrExpired is wrapped by a [Verifier] error for a genuine token that
// has expired (an OAuth access token its client has yet to refresh): the
// request gets 401 like any invalid token, but it is no guess, so it is
// not counted as a failed attempt (many users of one app share its
// address).
var ErrExpired = errors.New("mcpendpoint: token expired")

// DefaultMaxBodyBytes is the default cap of a request body.
const DefaultMaxBodyBytes = 4 << 20

// DefaultSeparator replaces "/" in tool and prompt names.
const DefaultSeparator = "__"

// The defaults of the session limits (see [Options]).
const (
	DefaultSessionTimeout     = 30 * time.Minute
	DefaultMaxSessionsPerUser = 64
	DefaultMaxSessions        = 10_000
	// DefaultMaxOpenPerUser caps a user's open requests on the stateless
	// revision (see [Options.MaxOpenPerUser]).
	DefaultMaxOpenPerUser = 256
)

// sessionVersions are the revisions of stateful sessions (initialize),
// newest first; 2026-07-28 is served statelessly (see stateless.go).
var sessionVersions = []string{mcpwire.V20251125, mcpwire.V20250618, mcpwire.V20250326}

// Options configures an [Endpoint]. The zero value is ready to use.
type Options struct {
	// Limiter, when set, throttles invalid tokens: once it locks out an
	// address (or a token), that address's invalid tokens get 429 instead
	// of 401. Valid tokens are accepted regardless.
	Limiter Limiter
	// AddrKey returns the limiter's key of a request's client (the host
	// wires guard.TrustedProxies.Key: X-Forwarded-For only from trusted
	// proxies). The default is guard.AddrKey of RemoteAddr.
	AddrKey func(r *http.Request) string
	// AllowedHosts are host names (no port) a request that reached a
	// loopback address may name besides loopback ones: the host of the
	// operator's public URL, behind a proxy on this machine. Others get
	// 403 (DNS rebinding).
	AllowedHosts []string
	// Refusals rate-limits the log lines of refused requests; share the
	// server's. Nil means one of the endpoint's own.
	Refusals *guard.RefusalLog
	// Separator replaces "/" in tool and prompt names (default "__"). It
	// may hold only A-Z, a-z, 0-9, '_', '-' and '.', at most 8 of them.
	Separator string
	// AllowedOrigins lists the browser origins ("https://app.example.com",
	// scheme://host[:port], no path) whose requests are served, besides
	// loopback origins, which are always allowed. "*" allows any origin. A
	// request without Origin (every non-browser client) is not affected.
	AllowedOrigins []string
	// MaxBodyBytes caps a request body (default [DefaultMaxBodyBytes]); a
	// larger one gets 413.
	MaxBodyBytes int64
	// SessionTimeout closes a session that has had no request for that
	// long (a request in flight holds it open; an open GET stream does
	// not); its client then gets 404 and must start a new session. Zero
	// means [DefaultSessionTimeout]; a negative value keeps idle sessions
	// until the client deletes them, the token is revoked or the endpoint
	// closes.
	SessionTimeout time.Duration
	// MaxSessionsPerUser caps the open sessions of one user (default
	// [DefaultMaxSessionsPerUser]; negative: no cap). A new session beyond
	// it closes the user's least recently used session that has no
	// request in flight; when every one is busy, initialize gets 429.
	MaxSessionsPerUser int
	// MaxSessions caps the open sessions of all users (default
	// [DefaultMaxSessions]; negative: no cap). Beyond it initialize gets
	// 503 with Retry-After, and no session of another user is closed.
	MaxSessions int
	// MaxOpenPerUser caps one user's requests open at once on the
	// stateless revision (2026-07-28), over all of the user's tokens and
	// scopes: calls in flight and subscriptions/listen streams, which stay
	// open for as long as the client listens (default
	// [DefaultMaxOpenPerUser]; negative: no cap). One more is refused at
	// once with 429, Retry-After and the rate-limit error (-32029, scope
	// "user", kind "concurrency"); other users are not affected. Sessions
	// have their own bounds (MaxSessionsPerUser, and 256 requests in
	// flight and 256 subscriptions per session).
	MaxOpenPerUser int
	// VerifyCacheTTL, when positive, lets a token verified once pass
	// without the verifier for that long. Only wire it when every
	// revocation calls [Endpoint.CloseToken] (which empties the cache of
	// that token at once); a token revoked otherwise stays usable for up to
	// the TTL. Failed verifications are never cached. Zero verifies every
	// request.
	VerifyCacheTTL time.Duration
	// ResourceMetadataURL, when set, is advertised in the WWW-Authenticate
	// header of a 401 (RFC 9728).
	ResourceMetadataURL string
	// ResourceMetadata, when set, returns the URL to advertise instead, on
	// each 401 (for a server that knows its URL only once it listens).
	ResourceMetadata func() string
	// Version is the server version reported to clients.
	Version string
	// Logger receives the endpoint's logs; nil discards them. Tokens are
	// never logged.
	Logger *slog.Logger
	// Telemetry, when set, records each tool call (a span and the
	// duration histogram) and passes the trace context on in _meta.
	Telemetry *telemetry.T
}

// Endpoint serves each authenticated user their own tools, prompts and
// resources over MCP Streamable HTTP. It is an [http.Handler]; all its
// methods are safe for concurrent use.
type Endpoint struct {
	host     Host
	verifier Verifier
	limiter  Limiter
	cache    *verifyCache // nil: verify every request
	addrKey  func(*http.Request) string
	hosts    []string
	refusals *guard.RefusalLog
	sep      string
	origins  map[string]bool
	anyOrig  bool
	maxBody  int64
	rmURL    string
	rmFunc   func() string
	log      *slog.Logger
	tel      *telemetry.T // nil: off
	impl     *mcp.Implementation
	info     []byte // serverInfo, JSON

	timeout    time.Duration // idle sessions; 0: never
	maxPerUser int           // 0: no cap
	maxAll     int           // 0: no cap
	maxOpen    int           // a user's open stateless requests; 0: no cap

	scratch       sync.Mutex // guards scratchServer
	scratchServer *mcp.Server
	stateless     http.Handler // go-sdk's, for 2026-07-28

	ctx    context.Context // cancelled by Close: refresh loops, the sweeper
	cancel context.CancelFunc

	closing atomic.Bool // set first by Close, read without a lock

	mu    sync.Mutex
	users map[string]*userState // by viewKey
	// views are each user's views (the whole and the scoped ones), for
	// the per-user session cap, which counts them all.
	views map[string]map[*userState]struct{}
	byID  map[string]*session // open sessions by Mcp-Session-Id
	// statelessReqs cancels the stateless requests in flight, by token ID.
	statelessReqs map[string]map[*context.CancelFunc]struct{}
	// statelessOpen counts each user's open stateless requests (maxOpen).
	statelessOpen map[string]int
	// statelessCapped: the user was refused at the cap (logged once) and
	// has not been under it since.
	statelessCapped map[string]bool
	wg              sync.WaitGroup // refresh loops, the sweeper, session cleanups
	open            atomic.Int64   // len(byID)
	calls           atomic.Int64   // tools/call answered
	fastCalls       atomic.Int64   // stateless tools/call taken by the fast path
	noFast          atomic.Bool    // the stateless fast path is off (tests compare it with go-sdk's)

	closeOnce sync.Once
}

// New returns an endpoint that serves h's tools to the principals v
// accepts. opts may be nil.
func New(h Host, v Verifier, opts *Options) (*Endpoint, error) {
	if h == nil {
		return nil, errors.New("mcpendpoint: New: nil Host")
	}
	if v == nil {
		return nil, errors.New("mcpendpoint: New: nil Verifier")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Separator == "" {
		o.Separator = DefaultSeparator
	}
	if err := checkSeparator(o.Separator); err != nil {
		return nil, fmt.Errorf("mcpendpoint: New: %w", err)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AddrKey == nil {
		o.AddrKey = func(r *http.Request) string { return guard.AddrKey(r.RemoteAddr) }
	}
	if o.Refusals == nil {
		o.Refusals = guard.NewRefusalLog(nil)
	}
	e := &Endpoint{
		host:       h,
		verifier:   v,
		limiter:    o.Limiter,
		addrKey:    o.AddrKey,
		hosts:      o.AllowedHosts,
		refusals:   o.Refusals,
		sep:        o.Separator,
		origins:    map[string]bool{},
		maxBody:    o.MaxBodyBytes,
		rmURL:      o.ResourceMetadataURL,
		rmFunc:     o.ResourceMetadata,
		log:        o.Logger,
		tel:        o.Telemetry,
		impl:       &mcp.Implementation{Name: "agenthost", Title: "agenthost", Version: o.Version},
		timeout:    limit(o.SessionTimeout, DefaultSessionTimeout),
		maxPerUser: int(limit(o.MaxSessionsPerUser, DefaultMaxSessionsPerUser)),
		maxAll:     int(limit(o.MaxSessions, DefaultMaxSessions)),
		maxOpen:    int(limit(o.MaxOpenPerUser, DefaultMaxOpenPerUser)),
		users:      map[string]*userState{},
		views:      map[string]map[*userState]struct{}{},
		byID:       map[string]*session{},

		statelessReqs:   map[string]map[*context.CancelFunc]struct{}{},
		statelessOpen:   map[string]int{},
		statelessCapped: map[string]bool{},
	}
	e.info, _ = json.Marshal(e.impl)
	if o.VerifyCacheTTL > 0 {
		e.cache = newVerifyCache(o.VerifyCacheTTL)
	}
	for _, origin := range o.AllowedOrigins {
		if origin == "*" {
			e.anyOrig = true
			continue
		}
		n, ok := normalizeOrigin(origin)
		if !ok {
			return nil, fmt.Errorf("mcpendpoint: New: allowed origin %q is not scheme://host[:port]", origin)
		}
		e.origins[n] = true
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.scratchServer = mcp.NewServer(e.impl, &mcp.ServerOptions{Logger: e.log})
	e.stateless = e.newStatelessHandler()
	e.wg.Add(1)
	go e.sweep()
	return e, nil
}

// limit maps an option to its value: zero is the default, negative is
// none (0).
func limit[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// bindingKey is what a session is bound to: the user and the very token
// that opened it. Another user's token, and another token of the same
// user, are refused on it.
func bindingKey(p Principal) string { return p.User + "\x00" + p.TokenID }

// ServeHTTP serves MCP Streamable HTTP (POST, GET for the server's stream,
// DELETE to end a session). In order: Host and Origin checks (403), the
// body cap (413), the bearer token (401, or 429 once the limiter locks
// the address or the token out), then the request by its shape: a
// session's (Mcp-Session-Id) or an initialize go to the stateful
// sessions, server/discover and 2026-07-28 requests to the stateless
// revision.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.isClosed() {
		http.Error(w, "the MCP endpoint is shutting down", http.StatusServiceUnavailable)
		return
	}
	if !guard.HostAllowed(r, e.hosts) {
		e.refusals.Refused(e.log, "mcp: refused a request with a foreign Host header", "host", clip(r.Host, 100), "addr", e.addrKey(r))
		http.Error(w, "forbidden: invalid Host header", http.StatusForbidden)
		return
	}
	if !e.originAllowed(r.Header.Get("Origin")) {
		e.refusals.Refused(e.log, "mcp: refused a request from a foreign origin", "origin", clip(r.Header.Get("Origin"), 100), "addr", e.addrKey(r))
		http.Error(w, "forbidden: origin not allowed", http.StatusForbidden)
		return
	}
	if r.ContentLength > e.maxBody {
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes", e.maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, e.maxBody)
	}

	token, ok := bearerToken(r)
	if !ok {
		e.unauthorized(w, "")
		return
	}
	// The token is checked first: a valid one is served whatever others
	// failed from the same address; the limiter throttles only failures.
	p, err := e.verify(r, token)
	switch {
	case errors.Is(err, ErrUnavailable):
		e.log.Error("mcp: cannot verify tokens", "err", err)
		http.Error(w, "cannot verify the token now: try again later", http.StatusServiceUnavailable)
		return
	case errors.Is(err, ErrExpired):
		// Not a guess: not counted (a 429 would stop the client from
		// refreshing, and one app's users share its address).
		e.refusals.Refused(e.log, "mcp: refused an expired token", "addr", e.addrKey(r))
		e.unauthorized(w, "invalid_token")
		return
	case err != nil:
		addr := e.addrKey(r)
		var lerr error
		if e.limiter != nil {
			lerr = e.limiter.Fail(addr, token)
		}
		e.refusals.Refused(e.log, "mcp: refused an invalid token", "addr", addr, "locked_out", lerr != nil)
		if lerr != nil {
			// The limiter's message is meant for the client (auth's says
			// when to try again, and never names the address).
			if ra, ok := lerr.(interface{ RetryAfterSeconds() int }); ok {
				w.Header().Set("Retry-After", fmt.Sprint(ra.RetryAfterSeconds()))
			}
			http.Error(w, lerr.Error(), http.StatusTooManyRequests)
			return
		}
		e.unauthorized(w, "invalid_token")
		return
	case p.User == "":
		// A valid token that stands for no user (an operator's) has no
		// tools to serve.
		e.refusals.Refused(e.log, "mcp: refused a token without a user", "tokenID", p.TokenID)
		http.Error(w, "forbidden: this token does not belong to a user", http.StatusForbidden)
		return
	}
	e.route(w, r, p)
}

// route serves an authenticated request by its shape.
func (e *Endpoint) route(w http.ResponseWriter, r *http.Request, p Principal) {
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
		e.serveSession(w, r, p, sid)
		return
	}
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet, http.MethodDelete:
		http.Error(w, fmt.Sprintf("Bad Request: %s requires an Mcp-Session-Id header", r.Method), http.StatusBadRequest)
		return
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if v := r.Header.Get("Mcp-Protocol-Version"); mcpwire.Stateless(v) {
		e.serveStateless(w, r, p)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		e.bodyError(w, err)
		return
	}
	var head struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &head) // a batch or garbage has no method
	r.Body = readCloser{bytes.NewReader(body), r.Body}
	switch {
	case head.Method == "initialize":
		e.initialize(w, r, p, body)
	case head.Method == "server/discover" || head.Params.Meta[mcp.MetaKeyProtocolVersion] != nil:
		e.serveStateless(w, r, p)
	case bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("[")):
		writeRPCError(w, http.StatusBadRequest, nil, mcpwire.CodeInvalidRequest,
			"Bad Request: no session: a JSON-RPC batch cannot open one (initialize must be sent alone)")
	default:
		writeRPCError(w, http.StatusBadRequest, nil, mcpwire.CodeInvalidRequest,
			"Bad Request: no session: the first request must be initialize (or use protocol revision 2026-07-28)")
	}
}

// verify asks the verifier, or the cache when it has the token.
func (e *Endpoint) verify(r *http.Request, token string) (Principal, error) {
	if e.cache == nil {
		return e.verifier.Verify(r.Context(), token)
	}
	key := sha256.Sum256([]byte(token))
	p, ok, gen := e.cache.get(key)
	if ok {
		return p, nil
	}
	p, err := e.verifier.Verify(r.Context(), token)
	if err == nil && p.User != "" {
		e.cache.put(key, p, gen)
	}
	return p, err
}

// Sessions returns the number of open sessions.
func (e *Endpoint) Sessions() int { return int(e.open.Load()) }

// CloseToken ends every session opened with token tokenID, and the
// token's stateless requests in flight. It returns at once: by then the
// sessions' calls in flight are cancelled and their
// further requests refused (404); what is left of closing them (resource
// unsubscriptions) runs in the background, and [Endpoint.Close] waits for
// that. The caller revokes the token in the verifier first (or at the
// same time), so that it cannot open new sessions. CloseToken suits a
// revocation callback that must return quickly.
func (e *Endpoint) CloseToken(tokenID string) {
	if tokenID == "" {
		return
	}
	if e.cache != nil {
		e.cache.revoke(tokenID)
	}
	e.mu.Lock()
	var out []*session
	for _, s := range e.byID {
		if s.p.TokenID == tokenID {
			out = append(out, s)
		}
	}
	for cancel := range e.statelessReqs[tokenID] {
		(*cancel)()
	}
	e.mu.Unlock()
	for _, s := range out {
		s.close("its token was revoked")
	}
}

// CloseUser closes every open session of user (a user disabled or
// deleted), whatever credential opened it. Their tokens are revoked
// too, which [Endpoint.CloseToken] hears; this also ends a session whose
// credential was not (and drops nothing else).
func (e *Endpoint) CloseUser(user string) {
	if user == "" {
		return
	}
	e.mu.Lock()
	var out []*session
	for _, s := range e.byID {
		if s.p.User == user {
			out = append(out, s)
		}
	}
	e.mu.Unlock()
	for _, s := range out {
		s.close("its user was disabled")
	}
}

// Close closes every session, cancels calls in flight (stateless ones
// too), stops listening to the host and waits for every goroutine the
// endpoint started. Requests
// that arrive later get 503. Close may be called more than once.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.mu.Lock()
		all := make([]*session, 0, len(e.byID))
		for _, s := range e.byID {
			all = append(all, s)
		}
		e.mu.Unlock()
		for _, s := range all {
			s.close("the endpoint is shutting down")
		}
		e.mu.Lock()
		for _, u := range e.users {
			u.stopLocked()
		}
		for _, reqs := range e.statelessReqs {
			for cancel := range reqs {
				(*cancel)()
			}
		}
		e.mu.Unlock()
		e.cancel()
		e.wg.Wait()
	})
	return nil
}

func (e *Endpoint) isClosed() bool { return e.closing.Load() }

// unauthorized answers 401 with a Bearer challenge (RFC 6750).
func (e *Endpoint) unauthorized(w http.ResponseWriter, code string) {
	params := []string{`realm="agenthost"`}
	rm := e.rmURL
	if e.rmFunc != nil {
		rm = e.rmFunc()
	}
	if rm != "" {
		params = append(params, fmt.Sprintf("resource_metadata=%q", rm))
	}
	if code != "" {
		params = append(params, fmt.Sprintf("error=%q", code))
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	msg := "unauthorized: a bearer token is required"
	if code != "" {
		msg = "unauthorized: invalid token"
	}
	http.Error(w, msg, http.StatusUnauthorized)
}

func (e *Endpoint) bodyError(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	http.Error(w, "reading the request body failed", http.StatusBadRequest)
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}

type readCloser struct {
	io.Reader
	io.Closer
}

// clip shortens s for a log line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
