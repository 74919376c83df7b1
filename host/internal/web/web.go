package web

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/guard"
	"github.com/agenthost/agenthost/host/internal/oidclogin"
	"github.com/agenthost/agenthost/settings"
)

// Options configures [New]. A nil *Options means the defaults; so does
// every zero field.
type Options struct {
	// Logger receives errors and refused sign-ins (default: discard).
	Logger *slog.Logger
	// Metrics, when set, serves /metrics (the Prometheus text of the
	// host's metrics) to operator tokens and sessions.
	Metrics http.Handler
	// Secure marks the server as served over TLS: the session cookie gets
	// the Secure attribute and the __Host- prefix, and responses carry
	// Strict-Transport-Security.
	Secure bool
	// BasePath is the path prefix the handler is served under, e.g.
	// "/agenthost"; empty means the root. Requests must carry it.
	BasePath string
	// MCPURL is the MCP endpoint's URL, shown on the settings page so that
	// users can point their clients at it (default: /mcp at the address
	// the request came to).
	MCPURL string
	// MCPSessions reports the open MCP sessions for the status page; nil
	// shows none.
	MCPSessions func() int
	// MaxBodyBytes limits request bodies (default 1 MiB); a larger one is
	// refused with 413.
	MaxBodyBytes int64
	// AddrKey returns the lockout's key of a request's client (the host
	// wires guard.TrustedProxies.Key: X-Forwarded-For only from trusted
	// proxies). The default is guard.AddrKey of RemoteAddr: behind a
	// reverse proxy every client then shares the proxy's key, which
	// throttles their failures together but refuses no valid credential.
	AddrKey func(r *http.Request) string
	// AllowedHosts are host names (no port) a request that reached a
	// loopback address may name besides loopback ones: the host of the
	// operator's public URL. Others get 403 (DNS rebinding).
	AllowedHosts []string
	// Refusals rate-limits the log lines of refused requests; share the
	// server's. Nil means one of the handler's own.
	Refusals *guard.RefusalLog
	// TrustedOrigins are origins other than the request's own from which
	// browsers may post forms (e.g. "https://agenthost.example.com" behind
	// a proxy that rewrites Host).
	TrustedOrigins []string
	// Apps, when set, lists the user's OAuth grants ("Connected apps") on
	// the settings page and at /api/v1/grants, and revokes them.
	Apps ConnectedApps
	// Approvals, when set, shows the user's calls waiting for approval
	// (the tool policy) on the settings page and at /api/v1/approvals,
	// and takes the user's answers.
	Approvals Approvals
	// SignIn starts an extension's OAuth sign-in of user to resource name
	// from this browser and returns the authorization URL to send it to
	// (the settings page's Connect buttons); nil offers none.
	SignIn func(w http.ResponseWriter, r *http.Request, user, extName, name string) (authURL string, err error)
	// Users, when set, serves the operator's users page (/users) and
	// operator API (/api/operator/v1/users): list, disable, enable,
	// delete.
	Users *TokenAdmin
	// OIDC, when set, signs people in with the operator's OpenID Connect
	// provider: the sign-in page offers it first.
	OIDC *oidclogin.Login
	// Recheck, when set, is called with the user of every request of a
	// user's web session (it decides itself when to ask the provider
	// again); a *oidclogin.Refusal ends the session (the user was
	// disabled), another error is logged and decides nothing.
	Recheck func(ctx context.Context, user string) error
	_       struct{}
}

// Limits and names.
const (
	defaultMaxBody = 1 << 20
	csrfField      = "_csrf"
	// loginCookie carries the sign-in form's anti-forgery value before
	// there is a session (double submit).
	loginCookie = "agenthost_login"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Host is what the web UI and JSON API need from the host (*host.Host is
// one). Its methods are called concurrently; see package host for what
// each does.
type Host interface {
	api.Tools
	api.Settings
	api.Status
	SecretNames(ctx context.Context, user, extension string) ([]string, error)
}

// server holds the handler's state; it has no goroutines of its own.
type server struct {
	h        Host
	a        *auth.Store
	logger   *slog.Logger
	refusals *guard.RefusalLog
	opts     Options
	base     string
	cookie   string
	tmpl     *template.Template
}

// New returns the handler of the settings web UI (/settings), its JSON API
// (/api/v1/) and the operator status page (/status, /status.json), all
// under opts.BasePath. Every user sees and changes only their own data: the
// user comes from the session or the bearer token, never from the request.
func New(h Host, a *auth.Store, opts *Options) http.Handler {
	s := newServer(h, a, opts)
	o := s.opts
	r := chi.NewRouter()
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed)
	s.routes(r)
	var root http.Handler = r
	if s.base != "" {
		m := chi.NewRouter()
		m.NotFound(s.notFound)
		m.Mount(s.base, r)
		root = m
	}
	cop := http.NewCrossOriginProtection()
	for _, origin := range o.TrustedOrigins {
		if err := cop.AddTrustedOrigin(origin); err != nil {
			o.Logger.Error("ignoring a trusted origin", "origin", origin, "err", err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refusals.Refused(s.logger, "web: refused a cross-origin request", "addr", s.addrKey(r), "path", r.URL.Path)
		s.forbidden(w, r, "cross-origin request refused")
	}))
	return s.recoverer(s.headers(s.checkHost(s.limitBody(cop.Handler(root)))))
}

// newServer builds the handler's state from the options, defaults filled
// in.
func newServer(h Host, a *auth.Store, opts *Options) *server {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.AddrKey == nil {
		o.AddrKey = func(r *http.Request) string { return guard.AddrKey(r.RemoteAddr) }
	}
	if o.Refusals == nil {
		o.Refusals = guard.NewRefusalLog(nil)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = defaultMaxBody
	}
	s := &server{
		h: h, a: a, logger: o.Logger, refusals: o.Refusals, opts: o,
		base:   strings.TrimRight(o.BasePath, "/"),
		cookie: "agenthost_session",
		tmpl:   template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")),
	}
	if o.Secure {
		s.cookie = "__Host-agenthost_session"
	}
	return s
}

func (s *server) routes(r chi.Router) {
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { s.redirect(w, r, "/settings") })
	r.Get("/static/*", s.static)

	r.Get("/settings/login", s.loginPage)
	r.Post("/settings/login", s.loginSubmit)
	r.Get(OIDCStartPath, s.oidcStart)
	r.Get(OIDCCallbackPath, s.oidcCallback)
	r.Group(func(r chi.Router) {
		r.Use(s.requireSession)
		r.Post("/settings/logout", s.logout)
		r.Get("/settings", s.settingsPage)
		r.Post("/settings/_tokens", s.createToken)
		r.Post("/settings/_tokens/revoke", s.revokeToken)
		r.Post("/settings/_apps/revoke", s.revokeApp)
		r.Post("/settings/_approvals", s.decideApproval)
		r.Post("/settings/_pins/approve", s.approvePinsForm)
		r.Get("/settings/agents", s.agentsPage)
		r.Post("/settings/agents/token", s.agentToken)
		r.Post("/settings/_actions/{ext}/{action}", s.settingsAction)
		r.Post("/settings/_secrets/{ext}", s.setNamedSecret)
		r.Post("/settings/_secrets/{ext}/delete", s.deleteNamedSecret)
		r.Get("/settings/connect/{ext}/{name}", s.connectPage)
		r.Post("/settings/connect/{ext}/{name}", s.connect)
		r.Post("/settings/{ext}/{section}", s.saveSection)
		r.Post("/settings/{ext}/{section}/clear", s.clearSecretField)
	})

	r.Get("/status", s.statusPage)
	r.Get("/status.json", s.statusJSON)
	if s.opts.Metrics != nil {
		r.Get("/metrics", func(w http.ResponseWriter, r *http.Request) {
			if s.operator(w, r, true) {
				s.opts.Metrics.ServeHTTP(w, r)
			}
		})
	}
	s.operatorRoutes(r)

	r.Route("/api/v1", func(r chi.Router) {
		r.Use(s.requireBearer)
		r.NotFound(s.apiNotFound)
		r.MethodNotAllowed(s.apiMethodNotAllowed)
		r.Get("/me", s.apiMe)
		r.Get("/sections", s.apiSections)
		r.Get("/settings/{ext}/{section}", s.apiGetSettings)
		r.Put("/settings/{ext}/{section}", s.apiPutSettings)
		r.Patch("/settings/{ext}/{section}", s.apiPatchSettings)
		r.Get("/secrets/{ext}", s.apiSecretNames)
		r.Put("/secrets/{ext}/{name}", s.apiPutSecret)
		r.Delete("/secrets/{ext}/{name}", s.apiDeleteSecret)
		r.Get("/tokens", s.apiTokens)
		r.Post("/tokens", s.apiCreateToken)
		r.Delete("/tokens/{id}", s.apiRevokeToken)
		r.Get("/grants", s.apiGrants)
		r.Get("/approvals", s.apiApprovals)
		r.Post("/approvals/{id}", s.apiDecideApproval)
		r.Delete("/grants/{id}", s.apiRevokeGrant)
		r.Get("/tools", s.apiTools)
		r.Get("/status", s.apiStatus)
		r.Post("/extensions/{ext}/actions/{action}", s.apiAction)
		r.Get("/audit", s.apiAudit)
		r.Get("/pins", s.apiPins)
		r.Post("/pins/approve", s.apiApprovePins)
	})
}

// addrKey is the lockout key of a request's client.
func (s *server) addrKey(r *http.Request) string { return s.opts.AddrKey(r) }

// path returns p under the base path.
func (s *server) path(p string) string { return s.base + p }

func (s *server) redirect(w http.ResponseWriter, r *http.Request, p string) {
	http.Redirect(w, r, s.path(p), http.StatusSeeOther)
}

// headers sets the security headers of every response.
func (s *server) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if s.opts.Secure {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses (403) a request that reached a loopback address
// naming another host: a DNS-rebinding page's, before any cookie or token
// is looked at.
func (s *server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !guard.HostAllowed(r, s.opts.AllowedHosts) {
			s.refusals.Refused(s.logger, "web: refused a request with a foreign Host header", "host", r.Host, "addr", s.addrKey(r))
			s.forbidden(w, r, "invalid Host header")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody caps every request body.
func (s *server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			s.tooLarge(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a panic in a handler into a 500 and a log line.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.Error("web handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(v))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *server) static(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "*")
	if name == "" || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		s.notFound(w, r)
		return
	}
	b, err := fs.ReadFile(staticFS, "static/"+name)
	if err != nil {
		s.notFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case strings.HasSuffix(name, ".svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// isAPI reports whether r is for the JSON API or the status JSON, whose
// errors are JSON.
func (s *server) isAPI(r *http.Request) bool {
	p := strings.TrimPrefix(r.URL.Path, s.base)
	return strings.HasPrefix(p, "/api/") || p == "/status.json" || p == "/metrics"
}

func (s *server) notFound(w http.ResponseWriter, r *http.Request) {
	if s.isAPI(r) {
		s.apiNotFound(w, r)
		return
	}
	s.errorPage(w, r, http.StatusNotFound, "Not found", "There is no page here.")
}

func (s *server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if s.isAPI(r) {
		s.apiMethodNotAllowed(w, r)
		return
	}
	s.errorPage(w, r, http.StatusMethodNotAllowed, "Method not allowed", "This page does not accept "+r.Method+".")
}

func (s *server) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	if s.isAPI(r) {
		writeError(w, http.StatusForbidden, msg, nil)
		return
	}
	s.errorPage(w, r, http.StatusForbidden, "Forbidden", msg)
}

func (s *server) tooLarge(w http.ResponseWriter, r *http.Request) {
	msg := fmt.Sprintf("request body too large (the limit is %d bytes)", s.opts.MaxBodyBytes)
	if s.isAPI(r) {
		writeError(w, http.StatusRequestEntityTooLarge, msg, nil)
		return
	}
	s.errorPage(w, r, http.StatusRequestEntityTooLarge, "Too large", msg)
}

// errorPage renders a short HTML page for a failed request.
func (s *server) errorPage(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
	s.render(w, r, code, "error.html", map[string]any{"Base": s.base, "Title": title, "Message": msg})
}

// render executes a template into a buffer, then writes it, so that a
// template error is a clean 500.
func (s *server) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		s.logger.Error("rendering a page", "template", name, "path", r.URL.Path, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// isBodyTooLarge reports whether err comes from the body limit.
func isBodyTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

// hostErrStatus maps a host error to an HTTP status and a message that is
// safe to show: the host's own words for a client's mistake, a generic
// sentence (and a log line) for anything else.
func (s *server) hostErrStatus(r *http.Request, err error) (int, string) {
	switch {
	case errors.Is(err, ext.ErrInvalidArgument), errors.Is(err, settings.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, ext.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, ext.ErrPermission):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, ext.ErrUnavailable):
		s.logger.Warn("host unavailable", "path", r.URL.Path, "err", err)
		return http.StatusServiceUnavailable, "an extension is unavailable; try again shortly"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "the request was cancelled or timed out"
	}
	s.logger.Error("host error", "path", r.URL.Path, "err", err)
	return http.StatusInternalServerError, "internal error; the host's log has the details"
}

// userSection finds a user-scope section; system sections belong to the
// operator and are not served here.
func (s *server) userSection(ctx context.Context, extName, id string) (api.Section, bool) {
	for _, sec := range s.userSections(ctx) {
		if sec.Extension == extName && sec.ID == id {
			return sec, true
		}
	}
	return api.Section{}, false
}

// userSections lists the user-scope sections. A host that cannot list
// them (only a remote one could fail) is logged and shows none.
func (s *server) userSections(ctx context.Context) []api.Section {
	secs, err := s.h.Sections(ctx)
	if err != nil {
		s.logger.Error("listing the settings sections", "err", err)
	}
	var out []api.Section
	for _, sec := range secs {
		if sec.Scope == string(settings.ScopeUser) {
			out = append(out, sec)
		}
	}
	return out
}

// hasExtension reports whether the host has an extension of this name.
func (s *server) hasExtension(ctx context.Context, name string) bool {
	exts, err := s.h.Extensions(ctx)
	if err != nil {
		s.logger.Error("listing the extensions", "err", err)
	}
	for _, e := range exts {
		if e.Name == name {
			return true
		}
	}
	return false
}

// mcpURL is the MCP endpoint's URL shown on the settings page: the one
// configured, else the one this request came to.
func (s *server) mcpURL(r *http.Request) string {
	if s.opts.MCPURL != "" {
		return s.opts.MCPURL
	}
	scheme := "http"
	if r.TLS != nil || s.opts.Secure {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/mcp"
}

// equalSecret compares two secrets in constant time.
func equalSecret(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// writeJSON writes v as JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// apiError is the body of every JSON error.
type apiError struct {
	Error  string       `json:"error"`
	Fields []fieldError `json:"fields,omitempty"`
}

type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, code int, msg string, fields []fieldError) {
	writeJSON(w, code, apiError{Error: msg, Fields: fields})
}

// retryAfter sets Retry-After from a lockout error.
func retryAfter(w http.ResponseWriter, err error) {
	var le *auth.LockoutError
	if errors.As(err, &le) {
		w.Header().Set("Retry-After", strconv.Itoa(int(le.RetryAfter/time.Second)))
	}
}

var funcs = template.FuncMap{
	"exposure": func(e ext.Exposure) string {
		if e == "" {
			return string(ext.ExposureDirect)
		}
		return string(e)
	},
	// datetime is a time for a <time datetime> attribute, which app.js
	// shows in the browser's time zone.
	"datetime": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
}
