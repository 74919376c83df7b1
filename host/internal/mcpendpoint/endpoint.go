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

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/guard"
)

// Host is what the endpoint needs from the host (*host.Host is one). Its
// methods are called concurrently.
type Host interface {
	// Tools returns the user's tools, activating the user on first use.
	Tools(ctx context.Context, user string) ([]api.Tool, error)
	// Call runs a tool for user; args and the result travel as raw JSON.
	Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error)
	// Subscribe returns a channel that receives a value (coalesced)
	// whenever the user's tools change, until cancel is called or ctx
	// ends.
	Subscribe(ctx context.Context, user string) (events <-chan struct{}, cancel func())
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

// DefaultSeparator replaces "/" in tool names.
const DefaultSeparator = "__"

// protocolVersions lists the MCP revisions the endpoint speaks, newest
// first (see the package doc for why not 2026-07-28).
var protocolVersions = []string{"2025-11-25", "2025-06-18"}

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
	// Separator replaces "/" in tool names (default "__"). It may hold only
	// A-Z, a-z, 0-9, '_', '-' and '.', at most 8 of them.
	Separator string
	// AllowedOrigins lists the browser origins ("https://app.example.com",
	// scheme://host[:port], no path) whose requests are served, besides
	// loopback origins, which are always allowed. "*" allows any origin. A
	// request without Origin (every non-browser client) is not affected.
	AllowedOrigins []string
	// MaxBodyBytes caps a request body (default [DefaultMaxBodyBytes]); a
	// larger one gets 413.
	MaxBodyBytes int64
	// SessionTimeout closes a session that has received no POST for that
	// long; its client then gets 404 and must start a new session. Zero
	// keeps idle sessions until the client deletes them, the token is
	// revoked or the endpoint closes.
	SessionTimeout time.Duration
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
}

// Endpoint serves each authenticated user their own tools over MCP
// Streamable HTTP. It is an [http.Handler]; all its methods are safe for
// concurrent use.
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
	impl     *mcp.Implementation

	sdk           http.Handler // go-sdk's handler behind its bearer middleware
	probe         *mcp.Server  // answers go-sdk's per-request version check
	scratch       sync.Mutex   // guards scratchServer
	scratchServer *mcp.Server

	ctx    context.Context // cancelled by Close: refresh loops, calls
	cancel context.CancelFunc

	closing atomic.Bool // set first by Close, read without a lock

	mu       sync.Mutex
	closed   bool
	users    map[string]*userState
	sessions map[*session]struct{} // pending and bound
	byID     map[string]*session   // bound sessions by Mcp-Session-Id
	wg       sync.WaitGroup        // refresh loops and session waiters
	open     atomic.Int64          // bound sessions
	fast     atomic.Int64          // tools/call served by the fast path
	noFast   bool                  // go-sdk must see every request (SessionTimeout)

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
		host:     h,
		verifier: v,
		limiter:  o.Limiter,
		addrKey:  o.AddrKey,
		hosts:    o.AllowedHosts,
		refusals: o.Refusals,
		sep:      o.Separator,
		origins:  map[string]bool{},
		maxBody:  o.MaxBodyBytes,
		rmURL:    o.ResourceMetadataURL,
		rmFunc:   o.ResourceMetadata,
		log:      o.Logger,
		impl:     &mcp.Implementation{Name: "agenthost", Title: "agenthost", Version: o.Version},
		users:    map[string]*userState{},
		sessions: map[*session]struct{}{},
		byID:     map[string]*session{},
		// go-sdk's idle timeout counts only the requests it sees.
		noFast: o.SessionTimeout > 0,
	}
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
	e.probe = mcp.NewServer(e.impl, &mcp.ServerOptions{SupportedProtocolVersions: protocolVersions, Logger: e.log})
	e.scratchServer = mcp.NewServer(e.impl, &mcp.ServerOptions{Logger: e.log})
	handler := mcp.NewStreamableHTTPHandler(e.getServer, &mcp.StreamableHTTPOptions{
		Logger:         e.log,
		SessionTimeout: o.SessionTimeout,
		// A POST is answered with one application/json body instead of an
		// SSE stream: ~10-15% less per call (measured), and nothing is lost,
		// since the endpoint sends no request-scoped messages; list_changed
		// travels on the session's standalone SSE stream (GET).
		JSONResponse:        true,
		MaxRequestBodyBytes: o.MaxBodyBytes,
		// go-sdk refuses a non-loopback Host on a loopback connection, as
		// ServeHTTP does first; ServeHTTP also allows AllowedHosts, which
		// go-sdk does not know of, so then only ServeHTTP checks.
		DisableLocalhostProtection: len(o.AllowedHosts) > 0,
	})
	// go-sdk binds a session to TokenInfo.UserID and refuses (403) a
	// request for it that carries another. Only its own middleware can put
	// TokenInfo in the context, so it runs after our check, reading the
	// principal we verified instead of verifying again.
	e.sdk = auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		p, ok := ctx.Value(principalKey{}).(Principal)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: bindingKey(p)}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(handler)
	return e, nil
}

// bindingKey is what a session is bound to: the user and the very token
// that opened it. Another user's token, and another token of the same
// user, are refused on it.
func bindingKey(p Principal) string { return p.User + "\x00" + p.TokenID }

type principalKey struct{}

// slotKey marks a request that may open a session; getServer fills the
// slot at most once per request, however often go-sdk asks.
type slotKey struct{}

type slot struct {
	u    *userState
	p    Principal
	once sync.Once
	s    *session
}

// ServeHTTP serves MCP Streamable HTTP (POST, GET for the server's stream,
// DELETE to end a session). In order: Host and Origin checks (403), the
// body cap (413), the bearer token (401, or 429 once the limiter locks
// the address or the token out), batch rejection (400), then go-sdk.
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

	if r.Method == http.MethodPost {
		if batch, err := peekBatch(r); err != nil {
			e.bodyError(w, err)
			return
		} else if batch {
			writeRPCError(w, http.StatusBadRequest, -32600, "JSON-RPC batches are not supported")
			return
		}
	}

	if sid := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodPost && sid != "" && !e.noFast && e.fastCall(w, r, p, sid) {
		return
	}
	ctx := context.WithValue(r.Context(), principalKey{}, p)
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		// This request may open a session: make sure the user's tools are
		// loaded, and let getServer build the session's server from them.
		u, err := e.acquire(r.Context(), p.User)
		if err != nil {
			if errors.Is(err, errClosed) {
				http.Error(w, "the MCP endpoint is shutting down", http.StatusServiceUnavailable)
				return
			}
			e.log.Error("mcp: loading a user's tools", "user", p.User, "err", err)
			writeRPCError(w, http.StatusServiceUnavailable, -32603, "could not load your tools: try again later")
			return
		}
		sl := &slot{u: u, p: p}
		defer e.settle(sl)
		ctx = context.WithValue(ctx, slotKey{}, sl)
	}
	e.sdk.ServeHTTP(w, r.WithContext(ctx))
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

// getServer gives go-sdk the server of a new session, built once per
// request; every other request gets the probe, which go-sdk consults only
// for the protocol versions.
func (e *Endpoint) getServer(r *http.Request) *mcp.Server {
	sl, _ := r.Context().Value(slotKey{}).(*slot)
	if sl == nil {
		return e.probe
	}
	sl.once.Do(func() { sl.s = e.newSession(sl.u, sl.p) })
	if sl.s == nil {
		return nil // the endpoint closed: go-sdk answers 400
	}
	return sl.s.server
}

// settle runs after a request that could open a session: a session that
// was not bound (the request was not a successful initialize) is dropped,
// and the request's hold on the user is released.
func (e *Endpoint) settle(sl *slot) {
	if sl.s != nil {
		e.mu.Lock()
		bound := sl.s.ss != nil
		e.mu.Unlock()
		if !bound {
			e.drop(sl.s)
		}
	}
	e.release(sl.u)
}

// Sessions returns the number of open sessions.
func (e *Endpoint) Sessions() int { return int(e.open.Load()) }

// CloseToken ends every session opened with token tokenID. It returns at
// once: by then the sessions' calls in flight are cancelled and their
// further requests refused; they close in the background, and
// [Endpoint.Close] waits for that. The caller revokes the token in the
// verifier first (or at the same time), so that it cannot open new
// sessions. CloseToken suits a revocation callback that must return
// quickly.
func (e *Endpoint) CloseToken(tokenID string) {
	if tokenID == "" {
		return
	}
	if e.cache != nil {
		e.cache.revoke(tokenID)
	}
	for _, s := range e.revoke(func(s *session) bool { return s.p.TokenID == tokenID }) {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return // Close closes them
		}
		e.wg.Add(1)
		e.mu.Unlock()
		go func() {
			defer e.wg.Done()
			s.close()
		}()
	}
}

// revoke marks the sessions that match as revoked (every request on them
// is refused from now on) and cancels their calls.
func (e *Endpoint) revoke(match func(*session) bool) []*session {
	var out []*session
	e.mu.Lock()
	for s := range e.sessions {
		if match(s) {
			s.revoked.Store(true)
			out = append(out, s)
		}
	}
	e.mu.Unlock()
	for _, s := range out {
		s.cancel()
	}
	return out
}

// Close closes every session, cancels calls in flight, stops listening to
// the host and waits for every goroutine the endpoint started. Requests
// that arrive later get 503. Close may be called more than once.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.mu.Lock()
		e.closed = true
		for _, u := range e.users {
			u.stopLocked()
		}
		e.mu.Unlock()
		e.cancel()
		for _, s := range e.revoke(func(*session) bool { return true }) {
			s.close()
		}
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

// peekBatch reports whether a POST body is a JSON array (a JSON-RPC
// batch), reading only up to its first significant byte and leaving the
// body whole for go-sdk.
func peekBatch(r *http.Request) (bool, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return false, nil
	}
	var head []byte
	buf := make([]byte, 64)
	for {
		n, err := r.Body.Read(buf)
		chunk := buf[:n]
		head = append(head, chunk...)
		for _, c := range chunk {
			if !isSpace(c) {
				r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
				return c == '[', nil
			}
		}
		if err == io.EOF {
			r.Body = readCloser{bytes.NewReader(head), r.Body}
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// writeRPCError answers with a JSON-RPC error that has no request ID.
func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`, code, msg)
}

// clip shortens s for a log line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
