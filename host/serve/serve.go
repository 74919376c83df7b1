package serve

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/internal/guard"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
	"github.com/agenthost/agenthost/host/internal/oauthflow"
	"github.com/agenthost/agenthost/host/internal/oauthserver"
	"github.com/agenthost/agenthost/host/internal/telemetry"
	"github.com/agenthost/agenthost/host/internal/web"
)

// The host implements what every surface needs of it.
var (
	_ mcpendpoint.Host = (*host.Host)(nil)
	_ web.Host         = (*host.Host)(nil)
	_ control.Host     = (*host.Host)(nil)
)

// Options configures [New]. A nil *Options means the defaults; so does
// every zero field.
type Options struct {
	// Logger receives the surfaces' logs (default: discard). Tokens and
	// secrets are never logged.
	Logger *slog.Logger
	// Addr is the address [Server.Listen] and [Server.ListenAndServe]
	// listen on, such as "127.0.0.1:8080" or "127.0.0.1:0" (default: the
	// host config's listen, else 127.0.0.1:7777). An address reachable
	// beyond this machine needs TLS in the host's config.
	Addr string
	// ControlSocket serves the agenthost CLI's control socket in the
	// host's data folder (owner-only) from New until Close, so that
	// `agenthost --config <file> tools --user U` and the other verbs reach
	// this host. A second server on the same data folder is refused.
	ControlSocket bool
	// Listener, when set, is the TCP listener [Server.Listen] returns
	// (wrapped in TLS when the host's config has a certificate) instead of
	// opening one on Addr: open it before the host, and pass its address
	// to the host ([host.Options].ListenAddr), so that with port 0 the
	// host's extensions are told the port bound, not port 0.
	Listener net.Listener

	// Set by tests only (export_test.go): address prefixes and the TLS
	// trust of OAuth client ID metadata document fetches, and a shorter
	// access token life.
	oauthAllow     []netip.Prefix
	oauthTLS       *tls.Config
	oauthAccessTTL time.Duration
	_              struct{}
}

// TokenInfo describes an issued token; never its value.
type TokenInfo = control.TokenInfo

// AuthStart is a started OAuth sign-in: the URL to open, and its state.
type AuthStart = oauthflow.Started

// AuthResult is how a sign-in ended.
type AuthResult = oauthflow.Result

// Server serves one host's surfaces. Create it with [New].
type Server struct {
	h       *host.Host
	cfg     host.Config
	log     *slog.Logger
	auth    *auth.Store
	oauth   *oauthserver.Server // nil when the host's config switches OAuth off
	tokens  *web.TokenAdmin
	ep      *mcpendpoint.Endpoint
	tel     *telemetry.T // nil: off
	flows   *oauthflow.Flows
	handler http.Handler
	srv     *http.Server
	tls     *tls.Config
	cert    atomic.Pointer[tls.Certificate] // served by tls; a reload swaps it
	// certFiles are the certificate and key files (resolved) that the
	// watcher (watchCert) polls; a reload may name others.
	certFiles atomic.Pointer[[2]string]
	ln        net.Listener    // Options.Listener, nil: Listen opens one
	ctl       *control.Server // nil without Options.ControlSocket
	stopRev   func()
	// stopOIDC unsubscribes the OpenID sign-in from the users' changes;
	// nil without a provider.
	stopOIDC func()

	refusals *guard.RefusalLog // shared by the surfaces

	// fresh holds the connections that have sent no request yet
	// (StateNew). Shutdown waits up to 5 s for each, and HTTP clients dial
	// spares that they may never use (a go-sdk client's last messages at a
	// session's end do): Close closes them instead of waiting.
	connMu sync.Mutex
	fresh  map[net.Conn]struct{}

	mu  sync.Mutex
	url string

	closeOnce sync.Once
	closeErr  error
}

// New prepares the surfaces of h: it opens the token store in h's data
// folder and builds the handlers, and with [Options.ControlSocket] starts
// the control socket. It listens on nothing else: call
// [Server.ListenAndServe], [Server.Serve], or mount [Server.Handler]. On
// error nothing is left open.
func New(h *host.Host, opts *Options) (*Server, error) {
	if h == nil {
		return nil, errors.New("serve: New: nil host")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	logger := cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	cfg := *h.Config()
	if o.Addr != "" {
		cfg.Listen = o.Addr
	}
	if err := cfg.CheckListen(); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{h: h, cfg: cfg, log: logger, url: cfg.BaseURL(), ln: o.Listener}
	if cfg.TLS.CertFile != "" {
		cert, err := loadCert(&cfg)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		s.cert.Store(cert)
		s.certFiles.Store(&[2]string{cfg.Resolve(cfg.TLS.CertFile), cfg.Resolve(cfg.TLS.KeyFile)})
		// The certificate is taken per handshake: a reload (a renewal)
		// swaps it for new connections, open ones keep theirs.
		s.tls = &tls.Config{MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil }}
		h.OnReload(func(_ context.Context, c *host.Config) (func(), error) {
			if c.TLS.CertFile == "" {
				return nil, nil // refused by the host: TLS cannot turn off in place
			}
			cert, err := loadCert(c)
			if err != nil {
				return nil, err
			}
			return func() {
				s.cert.Store(cert)
				s.certFiles.Store(&[2]string{c.Resolve(c.TLS.CertFile), c.Resolve(c.TLS.KeyFile)})
				if l := cert.Leaf; l != nil {
					logger.Info("tls: serving the certificate re-read", "certFile", c.TLS.CertFile, "serial", l.SerialNumber.String(), "notAfter", l.NotAfter)
				}
			}, nil
		})
	}
	// One client-address function, one lockout and one refusal log for
	// every surface.
	proxies, err := guard.NewTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("serve: trustedProxies: %w", err)
	}
	var hosts []string
	if h := guard.HostOf(cfg.PublicURL); h != "" {
		hosts = []string{h}
	}
	s.refusals = guard.NewRefusalLog(nil)
	a, err := auth.Open(filepath.Join(cfg.DataPath(), auth.FileName), &auth.Options{Logger: logger, Refusals: s.refusals, OnEvent: auditAuth(h)})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.auth = a
	s.tokens = &web.TokenAdmin{Store: a, BaseURL: s.URL, Host: h}
	h.SetTokenMinter(minter{a})
	base := guard.PathOf(cfg.PublicURL)
	webOpts := &web.Options{Logger: logger.With("surface", "web"), Secure: s.tls != nil,
		AddrKey: proxies.Key, AllowedHosts: hosts, Refusals: s.refusals, BasePath: base, Users: s.tokens}
	oidcLogin, recheck, err := s.openOIDC(h, logger.With("surface", "oidc"))
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	if oidcLogin != nil {
		webOpts.OIDC, webOpts.Recheck = oidcLogin, recheck.Check
	}
	sessions := web.NewSessions(a, webOpts)
	if cfg.OAuth.On() {
		if s.oauth, err = s.openOAuth(&o, sessions, proxies.Key, hosts); err != nil {
			_ = a.Close()
			return nil, fmt.Errorf("serve: %w", err)
		}
		webOpts.Apps = s.oauth
		s.tokens.Apps = s.oauth
	}
	tcfg := cfg.Telemetry
	s.tel, err = telemetry.New(context.Background(), telemetry.Config{Metrics: tcfg.Metrics, OTLPEndpoint: tcfg.OTLPEndpoint,
		MaxSeries: tcfg.MaxSeries, Version: host.Build().Version}, func(ctx context.Context) telemetry.Gauges {
		// A scrape waits for the extensions' status at most this long.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ov, _ := h.Overview(ctx)
		g := telemetry.Gauges{Sessions: s.ep.Sessions(), ActiveUsers: ov.ActiveUsers, Processes: ov.ServiceProcesses,
			Servers: map[telemetry.ServerState]int{}, PinsBlocked: h.PinsBlocked(),
			RateLimited: h.RateLimited()}
		q := h.Queues()
		g.AuditQueued, g.AuditDropped, g.ApprovalsWaiting, g.InFlight = q.AuditQueued, q.AuditDropped, q.ApprovalsWaiting, q.InFlight
		entries, _ := h.Status(ctx, "") // an extension that fails is one "unavailable" entry
		for _, st := range entries {
			g.Servers[telemetry.ServerState{Extension: st.Extension, State: st.State}]++
		}
		return g
	})
	if err != nil {
		_ = a.Close()
		if s.oauth != nil {
			_ = s.oauth.Close()
		}
		return nil, fmt.Errorf("serve: telemetry: %w", err)
	}
	h.SetTelemetry(s.tel) // inner calls (code mode's) in the same histogram and spans
	webOpts.Metrics = s.tel.Handler()
	h.SetPolicyCounter(s.tel.PolicyDecision)
	h.SetApprovalLink(func() string { return s.URL() + "/settings" })
	webOpts.Approvals = h
	h.OnReloaded(func(ctx context.Context, err error) {
		outcome := "ok"
		if err != nil {
			outcome = "refused"
		}
		s.tel.Reloaded(ctx, outcome)
	})
	epOpts := &mcpendpoint.Options{
		Limiter: a.Limiter(), AddrKey: proxies.Key, AllowedHosts: hosts, Refusals: s.refusals, AllowedOrigins: cfg.AllowedOrigins,
		Logger: logger.With("surface", "mcp"), Version: host.Build().Version, Telemetry: s.tel,
		// Revocations reach CloseToken at once, so a short cache is safe.
		VerifyCacheTTL:     5 * time.Second,
		SessionTimeout:     time.Duration(cfg.MCP.SessionIdleMinutes * float64(time.Minute)),
		MaxSessionsPerUser: cfg.MCP.MaxSessionsPerUser, MaxSessions: cfg.MCP.MaxSessions,
		MaxOpenPerUser: cfg.MCP.MaxOpenRequestsPerUser,
	}
	if s.oauth != nil {
		epOpts.ResourceMetadata = s.oauth.ResourceMetadataURL
	}
	s.ep, err = mcpendpoint.New(h, verifier{a, s.oauth}, epOpts)
	if err != nil {
		_ = a.Close()
		_ = s.tel.Shutdown(context.Background())
		if s.oauth != nil {
			_ = s.oauth.Close()
		}
		return nil, fmt.Errorf("serve: %w", err)
	}
	stopTok := a.OnRevoke(s.ep.CloseToken)
	stopUsers := a.OnUserChange(s.userChanged)
	s.stopRev = func() { stopTok(); stopUsers() }
	if s.oauth != nil {
		// Revoking a grant closes its MCP sessions, as a token's do.
		stopGrant := s.oauth.OnRevoke(s.ep.CloseToken)
		s.stopRev = func() { stopTok(); stopUsers(); stopGrant() }
	}
	var mcpURL string
	if cfg.PublicURL != "" {
		mcpURL = cfg.BaseURL() + "/mcp"
	}
	s.flows = oauthflow.New(h, &oauthflow.Options{
		BaseURL: s.URL, Secure: s.tls != nil, Logger: logger.With("surface", "oauth"), Refusals: s.refusals,
		SessionUser: func(w http.ResponseWriter, r *http.Request) (string, bool) {
			u, _, ok := sessions.User(w, r)
			return u, ok
		},
	})
	webOpts.SignIn = func(w http.ResponseWriter, r *http.Request, user, extName, name string) (string, error) {
		st, err := s.flows.BeginBrowser(w, r, user, extName, name)
		if err != nil {
			return "", err
		}
		return st.URL, nil
	}
	webOpts.MCPURL, webOpts.MCPSessions = mcpURL, s.ep.Sessions
	ui := web.New(h, a, webOpts)
	mux := http.NewServeMux()
	if s.oauth != nil {
		// /.well-known/oauth-*, /oauth/authorize, /oauth/token,
		// /oauth/register, /oauth/revoke.
		s.oauth.Mount(mux)
	}
	// OAuth sign-ins of extensions (ext.Authorizer): the redirect URI and
	// the client ID metadata document.
	// They refuse a foreign Host on a loopback connection, as every
	// other surface does (DNS rebinding).
	ownHost := func(next http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !guard.HostAllowed(r, hosts) {
				s.refusals.Refused(logger, "oauth: refused a foreign Host", "host", r.Host, "addr", proxies.Key(r))
				http.Error(w, "forbidden: invalid Host header", http.StatusForbidden)
				return
			}
			next(w, r)
		})
	}
	mux.Handle(oauthflow.CallbackPath, ownHost(s.flows.ServeCallback))
	mux.Handle("GET "+oauthflow.ClientMetadataPath, ownHost(s.flows.ServeClientMetadata))
	mux.Handle("/mcp", s.ep)
	mux.Handle("/mcp/", s.ep)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/", withBase(base, ui))
	s.handler = underBase(base, mux)
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ConnState:         s.connState,
	}
	if err := s.syncUsers(context.Background()); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	if o.ControlSocket {
		if s.ctl, err = control.Serve(cfg.DataPath(), h, s.tokens, s.flows, logger); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	return s, nil
}

// certPoll is how often the TLS certificate and key files are checked for
// a change (a renewal written over them).
const certPoll = 2 * time.Second

// watchCert re-reads the certificate and key when either file changes on
// disk (its size or modification time, polled every period), besides a
// reload: a renewal is served to new connections without a reload. A pair
// that does not load (half written, or a key that does not match) is
// logged once per change and the old pair kept; the next change tries
// again. It returns when ctx ends.
func (s *Server) watchCert(ctx context.Context, period time.Duration) {
	stamp := func(files [2]string) string {
		var out string
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				return "" // a file missing for a moment: not a change
			}
			out += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
		}
		return out
	}
	last := stamp(*s.certFiles.Load())
	failed := ""
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		files := *s.certFiles.Load()
		now := stamp(files)
		if now == "" || now == last || now == failed {
			continue
		}
		cert, err := tls.LoadX509KeyPair(files[0], files[1])
		if err != nil {
			failed = now
			s.log.Warn("tls: the certificate or key changed on disk but does not load: still serving the old pair",
				"certFile", files[0], "keyFile", files[1], "error", err)
			continue
		}
		last, failed = now, ""
		s.cert.Store(&cert)
		if l := cert.Leaf; l != nil {
			s.log.Info("tls: serving the certificate re-read after it changed on disk", "certFile", files[0],
				"serial", l.SerialNumber.String(), "notAfter", l.NotAfter)
		}
	}
}

// loadCert reads the certificate and key of cfg's tls block; the error
// names the files.
func loadCert(cfg *host.Config) (*tls.Certificate, error) {
	certFile, keyFile := cfg.Resolve(cfg.TLS.CertFile), cfg.Resolve(cfg.TLS.KeyFile)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: loading the certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &cert, nil
}

// underBase serves mux's routes under base (the public URL's path) as
// well as at the root: a reverse proxy that forwards /agenthost/* may pass
// the path on or strip it, and one that also forwards the well-known
// locations RFC 8414 and RFC 9728 put at the root
// (/.well-known/oauth-authorization-server/agenthost) reaches those.
func underBase(base string, mux http.Handler) http.Handler {
	if base == "" {
		return mux
	}
	strip := http.StripPrefix(base, mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == base:
			http.Redirect(w, r, base+"/", http.StatusMovedPermanently)
		case strings.HasPrefix(r.URL.Path, base+"/"):
			strip.ServeHTTP(w, r)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// withBase gives the web UI, which routes under its base path, the
// requests [underBase] stripped of it.
func withBase(base string, ui http.Handler) http.Handler {
	if base == "" {
		return ui
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := *r
		u := *r.URL
		u.Path = base + u.Path
		if u.RawPath != "" {
			u.RawPath = base + u.RawPath
		}
		r2.URL = &u
		ui.ServeHTTP(w, &r2)
	})
}

// Handler returns the handler of every HTTP surface: /mcp, /settings,
// /api/v1/, /status, /status.json, /healthz, the OAuth routes
// (/.well-known/oauth-*, /oauth/authorize, /oauth/token, /oauth/register,
// /oauth/revoke), the OAuth callback and client metadata document of
// extensions' sign-ins (/oauth/callback, /oauth/client-metadata.json) and
// the UI's static files; under a public URL with a path, also under that
// path. Mount it at the root of a server of your own.
func (s *Server) Handler() http.Handler { return s.handler }

// URL returns the base URL people and clients use: the host config's
// publicURL when set, else the address listened on (known once
// [Server.Listen] or [Server.Serve] has run; before, the configured one).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// ControlSocket returns the control socket's path, or "" when the server
// has none.
func (s *Server) ControlSocket() string {
	if s.ctl == nil {
		return ""
	}
	return s.ctl.Path()
}

// Listen opens the listener of [Options.Addr], or takes
// [Options.Listener] (TLS when the host's config has a certificate), and
// fixes [Server.URL] to it. Pass it to [Server.Serve].
func (s *Server) Listen() (net.Listener, error) {
	ln := s.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.ListenAddr()); err != nil {
			return nil, fmt.Errorf("serve: listening: %w", err)
		}
	}
	s.useAddr(ln.Addr())
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	return ln, nil
}

// useAddr makes the URL the address served when no public URL is set
// (with port 0 the real port is known only now).
func (s *Server) useAddr(a net.Addr) {
	if s.cfg.PublicURL != "" {
		return
	}
	if _, ok := a.(*net.TCPAddr); !ok {
		return
	}
	scheme := "http"
	if s.tls != nil {
		scheme = "https"
	}
	s.mu.Lock()
	s.url = scheme + "://" + a.String()
	s.mu.Unlock()
}

// Serve serves the surfaces on ln (as it is: wrap it with TLS yourself,
// or get it from [Server.Listen]) until ctx ends or Close is called, then
// closes the server and returns. It returns nil after a normal stop.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.useAddr(ln.Addr())
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	// The certificate watcher: Serve owns it and waits for it.
	wctx, wcancel := context.WithCancel(ctx)
	var watcher sync.WaitGroup
	if s.tls != nil {
		watcher.Add(1)
		go func() {
			defer watcher.Done()
			s.watchCert(wctx, certPoll)
		}()
	}
	err := s.srv.Serve(ln)
	wcancel()
	watcher.Wait()
	stop()
	// Close (again) joins the close that ctx may have started.
	cerr := s.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, cerr)
}

// ListenAndServe listens on [Options.Addr] and serves until ctx ends or
// Close is called, then closes the server and returns.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := s.Listen()
	if err != nil {
		_ = s.Close()
		return err
	}
	return s.Serve(ctx, ln)
}

// Close stops the HTTP server (requests in flight get up to 5 s), ends the
// open MCP sessions, stops the control socket and closes the token store.
// It is idempotent; every call returns once the first has finished.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Open MCP sessions hold streams: end them first so Shutdown can
		// finish.
		s.ep.Close()
		done := make(chan error, 1)
		go func() { done <- s.srv.Shutdown(ctx) }()
		tick := time.NewTicker(20 * time.Millisecond)
		var err error
	wait:
		for {
			select {
			case err = <-done:
				break wait
			case <-tick.C:
				s.closeFresh()
			}
		}
		tick.Stop()
		if err != nil {
			_ = s.srv.Close()
		}
		s.stopRev()
		if s.stopOIDC != nil {
			s.stopOIDC()
		}
		var cerr error
		if s.ctl != nil {
			cerr = s.ctl.Close()
		}
		var oerr error
		if s.oauth != nil {
			oerr = s.oauth.Close()
		}
		// The exporters flush what the last calls recorded.
		terr := s.tel.Shutdown(ctx)
		s.closeErr = errors.Join(err, cerr, s.auth.Close(), oerr, terr)
		s.refusals.Flush()
	})
	return s.closeErr
}

// connState tracks the connections that have sent no request yet.
func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if st == http.StateNew {
		if s.fresh == nil {
			s.fresh = map[net.Conn]struct{}{}
		}
		s.fresh[c] = struct{}{}
		return
	}
	delete(s.fresh, c)
}

// closeFresh closes the connections that have sent no request yet.
func (s *Server) closeFresh() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	for c := range s.fresh {
		_ = c.Close()
		delete(s.fresh, c)
	}
}

// CreateToken issues a bearer token for user, to use on /mcp and the JSON
// API (name says what it is for, such as "laptop"). The token is returned
// once; only its hash is stored.
func (s *Server) CreateToken(ctx context.Context, user, name string) (string, error) {
	tok, _, err := s.tokens.CreateToken(ctx, user, name, false)
	return tok, err
}

// CreateOperatorToken issues an operator token, for /status and
// /status.json.
func (s *Server) CreateOperatorToken(ctx context.Context, name string) (string, error) {
	tok, _, err := s.tokens.CreateToken(ctx, "", name, true)
	return tok, err
}

// Tokens lists the tokens of user, or every token when user is "" (never
// their values).
func (s *Server) Tokens(ctx context.Context, user string) ([]TokenInfo, error) {
	return s.tokens.ListTokens(ctx, user)
}

// RevokeToken revokes a token at once, also on the MCP sessions and web
// sessions it opened.
func (s *Server) RevokeToken(ctx context.Context, id string) error {
	return s.tokens.RevokeToken(ctx, id)
}

// BeginAuth starts an OAuth sign-in of user (a user, or
// [host.OperatorUser] for a shared resource's operator credential) to
// resource name of extension extName (for ext-mcp: a remote MCP server),
// and returns the URL for the person to open. The browser comes back to
// this server's /oauth/callback, which completes it; [Server.WaitAuth]
// waits for that.
func (s *Server) BeginAuth(ctx context.Context, user, extName, name string) (*AuthStart, error) {
	return s.flows.Begin(ctx, user, extName, name)
}

// WaitAuth waits until the sign-in of state ends (the browser came back,
// or it expired) or ctx ends.
func (s *Server) WaitAuth(ctx context.Context, state string) (*AuthResult, error) {
	return s.flows.Wait(ctx, state)
}

// LoginLink returns a one-time sign-in link to the settings page for user.
func (s *Server) LoginLink(ctx context.Context, user string) (string, error) {
	return s.tokens.CreateLoginLink(ctx, user)
}

// openOAuth opens the OAuth authorization server: its store (oauth.db in
// the data folder) and its options from the host's config.
func (s *Server) openOAuth(o *Options, sessions *web.Sessions, addrKey func(*http.Request) string, hosts []string) (*oauthserver.Server, error) {
	oc := s.cfg.OAuth
	if base := s.cfg.BaseURL(); !strings.HasPrefix(base, "https://") && s.cfg.PublicURL != "" {
		s.log.Warn("oauth: publicURL is not https: apps such as Claude's connectors will refuse to connect", "publicURL", base)
	}
	st, err := oauthserver.OpenSQLite(filepath.Join(s.cfg.DataPath(), oauthserver.FileName), nil)
	if err != nil {
		return nil, err
	}
	opts := &oauthserver.Options{
		BaseURL: s.URL, Sessions: sessions, Limiter: s.auth.Limiter(), AddrKey: addrKey,
		AllowedHosts: hosts, Refusals: s.refusals,
		AccessTokenTTL:       cmp.Or(o.oauthAccessTTL, time.Duration(oc.AccessTokenMinutes)*time.Minute),
		RefreshTokenTTL:      time.Duration(oc.RefreshTokenDays) * 24 * time.Hour,
		AllowedRedirectHosts: oc.AllowedRedirectHosts,
		DocumentAllow:        o.oauthAllow,
		DocumentTLS:          o.oauthTLS,
		Logger:               s.log.With("surface", "oauth"),
	}
	if ap, err := netip.ParseAddrPort(s.cfg.ListenAddr()); err == nil {
		// A client_id pointing back at this host must not loop.
		opts.DocumentDeny = []netip.AddrPort{ap}
	}
	if oc.PassphraseHash != "" {
		opts.Passphrase = &oauthserver.Passphrase{Hash: oc.PassphraseHash, User: oc.PassphraseUser}
	}
	// A grant goes to a user the host knows and has not disabled (the
	// passphrase's user is the operator's: recorded as such).
	opts.Admit = func(ctx context.Context, user string) error {
		return s.auth.AdmitUser(ctx, user, auth.SourceOperator)
	}
	return oauthserver.New(st, opts)
}

// minter gives the host the auth store for the tokens extensions mint
// (host.TokenMinter).
type minter struct{ s *auth.Store }

func (m minter) MintToken(ctx context.Context, extName, user, name string, scope *ext.Scope, expires time.Time) (string, string, error) {
	plain, tok, err := m.s.CreateScopedToken(ctx, user, name, auth.TokenOptions{Scope: scope, Expires: expires, Extension: extName})
	if err != nil {
		if errors.Is(err, auth.ErrInvalidArgument) {
			err = ext.Mark(err, ext.ErrInvalidArgument)
		}
		return "", "", err
	}
	return plain, tok.ID, nil
}

func (m minter) RevokeMinted(ctx context.Context, extName, id string) (string, string, error) {
	toks, err := m.s.ListTokens(ctx, "")
	if err != nil {
		return "", "", err
	}
	for _, t := range toks {
		if t.ID != id {
			continue
		}
		if t.Extension != extName {
			return "", "", fmt.Errorf("token %q: no token this extension minted: %w", id, ext.ErrNotFound)
		}
		if err := m.s.RevokeToken(ctx, id); err != nil && !errors.Is(err, auth.ErrNotFound) {
			return "", "", err
		}
		return t.User, t.Name, nil
	}
	return "", "", nil // gone already (revoked, or never issued)
}

// verifier adapts the token store and the OAuth server to the MCP
// endpoint: host tokens (ah_...) go to the store, anything else is an
// OAuth access token; operator tokens are not user tokens, and a store
// failure is "cannot decide", not "invalid".
type verifier struct {
	s  *auth.Store
	oa *oauthserver.Server // nil: host tokens only
}

func (v verifier) Verify(ctx context.Context, tok string) (mcpendpoint.Principal, error) {
	if v.oa != nil && !strings.HasPrefix(tok, auth.TokenPrefix) {
		p, err := v.oa.Verify(ctx, tok)
		switch {
		case errors.Is(err, oauthserver.ErrUnavailable):
			return mcpendpoint.Principal{}, fmt.Errorf("%w: %v", mcpendpoint.ErrUnavailable, err)
		case errors.Is(err, oauthserver.ErrExpired), errors.Is(err, oauthserver.ErrRevoked):
			// Issued here, so no guess: 401 and not counted, also while
			// the address is locked out, so that the app signs in again.
			return mcpendpoint.Principal{}, fmt.Errorf("%w: %w", mcpendpoint.ErrExpired, err)
		case err != nil:
			return mcpendpoint.Principal{}, err
		}
		// The grant is the session's token: its refreshed tokens keep the
		// session, and revoking it closes the session.
		v.s.SeenUser(ctx, p.User) // at most once a minute per user
		return mcpendpoint.Principal{User: p.User, TokenID: p.GrantID, Expires: p.Expires}, nil
	}
	p, err := v.s.Verify(ctx, tok)
	switch {
	case errors.Is(err, auth.ErrRevoked), errors.Is(err, auth.ErrExpired):
		// Issued here, so no guess: 401 and not counted (see above).
		return mcpendpoint.Principal{}, fmt.Errorf("%w: %w", mcpendpoint.ErrExpired, err)
	case errors.Is(err, auth.ErrInvalidToken):
		return mcpendpoint.Principal{}, err
	case err != nil:
		return mcpendpoint.Principal{}, fmt.Errorf("%w: %v", mcpendpoint.ErrUnavailable, err)
	case p.Operator:
		// A genuine token of no user: the endpoint answers 403 and counts
		// no failed attempt.
		return mcpendpoint.Principal{TokenID: p.TokenID}, nil
	}
	// A scoped token's sessions see its scope only; an expiring one's end
	// when it expires.
	return mcpendpoint.Principal{User: p.User, TokenID: p.TokenID, Scope: p.Scope, Expires: p.Expires, Ends: p.Expires}, nil
}

// auditAuth records the token store's events (tokens issued and revoked,
// web sign-ins) in h's audit log.
func auditAuth(h *host.Host) func(kind, user, credential string) {
	return func(kind, user, credential string) {
		k := host.AuditKindToken
		if kind == "signin" {
			k = host.AuditKindSignIn
		}
		if user == "" {
			user = "@operator"
		}
		h.AuditEvent(host.AuditRecord{Kind: k, User: user, Credential: credential, Tool: kind, Outcome: "ok"})
	}
}
