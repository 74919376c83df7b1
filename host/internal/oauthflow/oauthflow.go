// Package oauthflow carries the OAuth sign-ins of extensions (the "auth"
// capability, [ext.Authorizer]) between a browser and the extension that
// started them: it starts a sign-in for a user (from the settings page or
// the CLI), keeps each pending one (its state, extension, user, resource
// and expiry; used once), serves the redirect URI /oauth/callback, which
// hands the authorization server's answer to that extension and tells the
// person plainly how it went, and serves the host's OAuth client ID
// metadata document /oauth/client-metadata.json.
//
// # Account-linking CSRF
//
// A redirect completes only the sign-in whose state it carries, once,
// before it expires. A sign-in started from the settings page is also
// bound to that browser (a cookie of its own, whose value's hash the
// sign-in keeps): the callback refuses it from another browser, so that
// a link planted by someone else cannot connect the victim's account at
// a provider to the planter's agenthost account. Whenever the callback sees a settings
// session of another user than the sign-in's, it refuses too. A refused
// redirect ends the sign-in.
//
// # Concurrency
//
// [Flows] is safe for concurrent use and starts no goroutines: expired
// sign-ins are dropped as new ones start and redirects arrive.
package oauthflow

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/netguard"
	"github.com/agenthost/agenthost/host/internal/guard"
)

// The paths this package serves, under the host's public URL.
const (
	CallbackPath       = "/oauth/callback"
	ClientMetadataPath = "/oauth/client-metadata.json"
)

// Host is what the sign-ins need of the host (*host.Host is one).
type Host interface {
	BeginAuth(ctx context.Context, extName string, req *ext.BeginAuthRequest) (*ext.BeginAuthResult, error)
	CompleteAuth(ctx context.Context, extName string, req *ext.CompleteAuthRequest) (*ext.CompleteAuthResult, error)
}

// Options configures [New]. Every zero field means its default.
type Options struct {
	// BaseURL returns the host's public URL (no trailing slash) when a
	// sign-in starts: the redirect URI and the metadata document live
	// under it.
	BaseURL func() string
	// SessionUser returns the user of the settings session a request
	// carries, if any (the operator's session is none); it may clear a
	// dead session's cookie on w.
	SessionUser func(w http.ResponseWriter, r *http.Request) (user string, ok bool)
	// Secure marks the host as served over TLS (the binding cookie gets
	// Secure and the __Host- prefix).
	Secure bool
	// MaxAge bounds how long a sign-in waits for its redirect (default
	// and most 10 minutes; the extension may ask for less).
	MaxAge time.Duration
	// Logger receives the sign-ins' outcomes (never a code or token).
	Logger *slog.Logger
	// Refusals rate-limits the log lines of refused redirects, which
	// anyone may send (share the server's; nil: a log of its own).
	Refusals *guard.RefusalLog
	_        struct{}
}

// Limits on the sign-ins waiting.
const (
	defaultMaxAge  = 10 * time.Minute
	maxPending     = 1024
	maxPendingUser = 8
)

// Flows holds the sign-ins under way. Create it with [New].
type Flows struct {
	h      Host
	o      Options
	cookie string

	mu      sync.Mutex
	pending map[string]*pending // by state
	// starting counts the sign-ins whose BeginAuth is under way, by user
	// and in all: they count towards the bounds.
	starting    map[string]int
	startingAll int
}

// pending is one sign-in waiting for its redirect.
type pending struct {
	ext, user, name string
	expires         time.Time
	binding         string // sha256 of the browser cookie's value; "" when not started from a browser
	done            chan struct{}
	result          Result // set before done closes
}

// Started is a sign-in that waits for the person's browser.
type Started struct {
	// URL is the authorization URL to open.
	URL string `json:"url"`
	// State names the sign-in (for [Flows.Wait]).
	State   string    `json:"state"`
	Expires time.Time `json:"expires"`
}

// Result is how a sign-in ended.
type Result struct {
	// OK is true when the account is connected.
	OK bool `json:"ok"`
	// Message says what happened, in words for the person.
	Message string `json:"message"`
}

// New returns the sign-ins of h.
func New(h Host, o *Options) *Flows {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.MaxAge <= 0 || opts.MaxAge > defaultMaxAge {
		opts.MaxAge = defaultMaxAge
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Refusals == nil {
		opts.Refusals = guard.NewRefusalLog(nil)
	}
	if opts.BaseURL == nil {
		opts.BaseURL = func() string { return "" }
	}
	f := &Flows{h: h, o: opts, pending: map[string]*pending{}, starting: map[string]int{}, cookie: "agenthost_signin"}
	if opts.Secure {
		f.cookie = "__Host-agenthost_signin"
	}
	return f
}

// Begin starts signing user (a user, or ext.OperatorUser) in to resource
// name of extension extName and returns the URL to open.
func (f *Flows) Begin(ctx context.Context, user, extName, name string) (*Started, error) {
	return f.begin(ctx, user, extName, name, "")
}

// BeginBrowser is Begin for the settings page: the sign-in is bound to
// the browser of r (a cookie set on w), and the callback refuses it from
// any other.
func (f *Flows) BeginBrowser(w http.ResponseWriter, r *http.Request, user, extName, name string) (*Started, error) {
	value := rand.Text()
	st, err := f.begin(r.Context(), user, extName, name, hash(value))
	if err != nil {
		return nil, err
	}
	// Lax: the authorization server's redirect back is a top-level
	// navigation from another site, which Strict would not carry. One
	// cookie per sign-in: a second one in this browser must not take the
	// first's place.
	http.SetCookie(w, &http.Cookie{Name: f.cookieName(st.State), Value: value, Path: "/", MaxAge: int(f.o.MaxAge / time.Second),
		HttpOnly: true, Secure: f.o.Secure || r.TLS != nil, SameSite: http.SameSiteLaxMode})
	return st, nil
}

// cookieName is the name of the binding cookie of the sign-in of state.
func (f *Flows) cookieName(state string) string { return f.cookie + "_" + hash(state)[:16] }

func (f *Flows) begin(ctx context.Context, user, extName, name, binding string) (*Started, error) {
	base := strings.TrimRight(f.o.BaseURL(), "/")
	if base == "" {
		return nil, fmt.Errorf("signing in: the host has no public URL to receive the redirect: %w", ext.ErrUnavailable)
	}
	// The slot is taken before the extension is asked, so that sign-ins
	// started at once cannot all pass the count.
	f.mu.Lock()
	f.pruneLocked(time.Now())
	n := f.starting[user]
	for _, p := range f.pending {
		if p.user == user {
			n++
		}
	}
	full := len(f.pending)+f.startingAll >= maxPending || n >= maxPendingUser
	if !full {
		f.starting[user]++
		f.startingAll++
	}
	f.mu.Unlock()
	if full {
		return nil, fmt.Errorf("too many sign-ins are waiting for a browser; finish one or wait %v: %w", f.o.MaxAge, ext.ErrUnavailable)
	}
	req := &ext.BeginAuthRequest{User: user, Name: name, RedirectURL: base + CallbackPath}
	if offersMetadata(base) {
		req.ClientMetadataURL = base + ClientMetadataPath
	}
	res, err := f.h.BeginAuth(ctx, extName, req)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startingAll--
	if f.starting[user]--; f.starting[user] <= 0 {
		delete(f.starting, user)
	}
	if err != nil {
		return nil, err
	}
	if _, err := netguard.CheckURL(res.URL, false); err != nil || res.State == "" {
		return nil, fmt.Errorf("extension %q started a sign-in with an authorization URL that is refused (http(s) only, plain http only on loopback) or no state: %w", extName, ext.ErrInvalidArgument)
	}
	expires := time.Now().Add(f.o.MaxAge)
	if !res.Expires.IsZero() && res.Expires.Before(expires) {
		expires = res.Expires
	}
	if _, dup := f.pending[res.State]; dup {
		return nil, fmt.Errorf("extension %q reused a sign-in state: %w", extName, ext.ErrInvalidArgument)
	}
	f.pending[res.State] = &pending{ext: extName, user: user, name: name, expires: expires, binding: binding, done: make(chan struct{})}
	return &Started{URL: res.URL, State: res.State, Expires: expires}, nil
}

// offersMetadata reports whether base can host a client ID metadata
// document: authorization servers fetch it, and accept only https.
func offersMetadata(base string) bool {
	u, err := url.Parse(base)
	return err == nil && u.Scheme == "https" && !netguard.IsLoopbackHost(u.Hostname())
}

// pruneLocked drops the sign-ins that expired, ending their waiters.
func (f *Flows) pruneLocked(now time.Time) {
	for s, p := range f.pending {
		if now.After(p.expires) {
			delete(f.pending, s)
			p.result = Result{Message: "The sign-in expired before the browser came back. Start it again."}
			close(p.done)
		}
	}
}

// take removes and returns the sign-in of state, nil when there is none
// (used, expired, or never started here).
func (f *Flows) take(state string) *pending {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruneLocked(time.Now())
	p := f.pending[state]
	delete(f.pending, state)
	return p
}

// Wait waits until the sign-in of state ends (its redirect arrived, or it
// expired) or ctx ends, and reports how it ended. A state that is not
// waiting is [ext.ErrNotFound].
func (f *Flows) Wait(ctx context.Context, state string) (*Result, error) {
	f.mu.Lock()
	p := f.pending[state]
	f.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("no sign-in is waiting under this state: %w", ext.ErrNotFound)
	}
	t := time.NewTimer(time.Until(p.expires) + 10*time.Millisecond)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		f.mu.Lock()
		f.pruneLocked(time.Now())
		f.mu.Unlock()
		// Not pruned when its redirect is being completed: that ends it.
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := p.result
	return &r, nil
}

// finish records how p ended and wakes its waiters.
func (f *Flows) finish(p *pending, r Result) {
	p.result = r
	close(p.done)
}

// ServeCallback is the handler of [CallbackPath]: it hands the redirect to
// the extension whose sign-in it completes and tells the person how it
// went. The query (it holds the authorization code) is never logged or
// shown.
func (f *Flows) ServeCallback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Referrer-Policy", "no-referrer") // the code is in this URL
	if r.Method != http.MethodGet {
		f.page(w, http.StatusMethodNotAllowed, false, "Not connected", "The sign-in answer must come as a GET.")
		return
	}
	state := r.URL.Query().Get("state")
	p := f.take(state)
	if p == nil {
		f.o.Refusals.Refused(f.o.Logger, "oauth callback: no sign-in waits for this state", "state_sha256", hash(state)[:12])
		f.page(w, http.StatusBadRequest, false, "Not connected",
			"This sign-in answer is not valid here: it was already used, it expired (sign-ins wait "+
				f.o.MaxAge.String()+"), or the sign-in was started elsewhere. Nothing was connected; start the sign-in again.")
		return
	}
	if why := f.refuse(w, r, state, p); why != "" {
		f.o.Logger.Warn("oauth callback refused", "extension", p.ext, "user", p.user, "resource", p.name, "reason", why)
		// End the extension's side of it too.
		_, _ = f.h.CompleteAuth(r.Context(), p.ext, &ext.CompleteAuthRequest{User: p.user, Name: p.name, State: state,
			Query: url.Values{"state": {state}, "error": {"access_denied"}, "error_description": {"refused by the host"}}.Encode()})
		msg := "This sign-in was refused, and nothing was connected: " + why + "."
		f.finish(p, Result{Message: msg})
		f.page(w, http.StatusForbidden, false, "Not connected", msg)
		return
	}
	if p.binding != "" {
		http.SetCookie(w, &http.Cookie{Name: f.cookieName(state), Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			Secure: f.o.Secure || r.TLS != nil, SameSite: http.SameSiteLaxMode})
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	res, err := f.h.CompleteAuth(ctx, p.ext, &ext.CompleteAuthRequest{User: p.user, Name: p.name, State: state, Query: r.URL.RawQuery})
	if err != nil {
		msg := "Signing in to " + p.name + " failed: " + Explain(err)
		f.o.Logger.Warn("oauth sign-in failed", "extension", p.ext, "user", p.user, "resource", p.name, "error", Explain(err))
		f.finish(p, Result{Message: msg})
		f.page(w, http.StatusBadRequest, false, "Not connected", msg)
		return
	}
	msg := cmp.Or(res.Message, "Connected to "+p.name+".")
	f.o.Logger.Info("oauth sign-in completed", "extension", p.ext, "user", p.user, "resource", p.name)
	f.finish(p, Result{OK: true, Message: msg})
	f.page(w, http.StatusOK, true, "Connected", msg+" You can close this page.")
}

// refuse says why the redirect may not complete p in this browser, or "".
func (f *Flows) refuse(w http.ResponseWriter, r *http.Request, state string, p *pending) string {
	if p.binding != "" {
		c, err := r.Cookie(f.cookieName(state))
		if err != nil || subtle.ConstantTimeCompare([]byte(hash(c.Value)), []byte(p.binding)) != 1 {
			return "it was started on the settings page of another browser"
		}
	}
	if f.o.SessionUser != nil {
		if u, ok := f.o.SessionUser(w, r); ok && u != p.user {
			return "this browser is signed in to agenthost as another user than the one who started it"
		}
	}
	return ""
}

// hostWrap is how package host wraps an extension's sign-in error.
var hostWrap = regexp.MustCompile(`^extension "[^"]*": (starting|completing) a sign-in of \S+ to "[^"]*": `)

// Explain returns the text of a sign-in's error for the person: the
// extension's own words (written for them), without the host's wrapping
// and the sentinel's name.
func Explain(err error) string {
	msg := hostWrap.ReplaceAllString(err.Error(), "")
	for _, s := range []error{ext.ErrInvalidArgument, ext.ErrPermission, ext.ErrUnavailable, ext.ErrNotFound} {
		msg = strings.TrimSuffix(msg, ": "+s.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "the extension did not answer in time"
	}
	return msg
}

var pageTmpl = template.Must(template.New("").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><link rel="stylesheet" href="../static/app.css">
<title>{{.Title}} · agenthost</title></head>
<body><main>
<h1>{{.Title}}</h1>
<p class="{{if .OK}}flash{{else}}error-box{{end}}" role="{{if .OK}}status{{else}}alert{{end}}">{{.Message}}</p>
<p><a href="../settings">Your settings</a></p>
</main></body></html>
`))

func (f *Flows) page(w http.ResponseWriter, code int, ok bool, title, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = pageTmpl.Execute(w, map[string]any{"Title": title, "Message": msg, "OK": ok})
}

// ServeClientMetadata is the handler of [ClientMetadataPath]: the host's
// OAuth client ID metadata document (draft-ietf-oauth-client-id-metadata-
// document), a public client that uses the authorization code grant with
// refresh tokens and redirects to [CallbackPath].
func (f *Flows) ServeClientMetadata(w http.ResponseWriter, _ *http.Request) {
	base := strings.TrimRight(f.o.BaseURL(), "/")
	u, _ := url.Parse(base)
	appType := "web"
	if u == nil || netguard.IsLoopbackHost(u.Hostname()) {
		appType = "native"
	}
	doc := map[string]any{
		"client_id":                  base + ClientMetadataPath,
		"client_name":                "agenthost",
		"client_uri":                 base,
		"redirect_uris":              []string{base + CallbackPath},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"application_type":           appType,
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_ = json.NewEncoder(w).Encode(doc)
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
