// Package surface runs the host's surfaces for `agenthost serve`: the HTTP
// server (the MCP endpoint at /mcp, the settings UI, the JSON API and the
// operator status page) and the control socket of the CLI. A [Surface]
// owns its listeners, stores and goroutines; Close stops them and waits.
package surface

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
	"github.com/agenthost/agenthost/host/internal/web"
)

// Surface is the running HTTP server and control socket of one host.
type Surface struct {
	Auth *auth.Store
	// URL is the base URL people and clients use.
	URL string
	// Addr is the address actually listened on.
	Addr string

	srv       *http.Server
	ep        *mcpendpoint.Endpoint
	ctl       *control.Server
	cancelRev func()
	done      chan struct{}
	serveErr  error
}

// OpenAuth opens the token store of a host's data folder.
func OpenAuth(cfg *host.Config, logger *slog.Logger) (*auth.Store, error) {
	return auth.Open(filepath.Join(cfg.DataPath(), auth.FileName), &auth.Options{Logger: logger})
}

// Start serves h as cfg says. On error nothing is left running.
func Start(ctx context.Context, cfg *host.Config, h *host.Host, logger *slog.Logger) (*Surface, error) {
	a, err := OpenAuth(cfg, logger)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr())
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	base := cfg.BaseURL()
	if cfg.PublicURL == "" {
		// With port 0 the real port is known only now.
		base = scheme(cfg) + "://" + ln.Addr().String()
	}
	s := &Surface{Auth: a, URL: base, Addr: ln.Addr().String(), done: make(chan struct{})}
	fail := func(err error) (*Surface, error) {
		_ = ln.Close()
		if s.ep != nil {
			s.ep.Close()
		}
		if s.cancelRev != nil {
			s.cancelRev()
		}
		_ = a.Close()
		return nil, err
	}
	s.ep, err = mcpendpoint.New(h, verifier{a}, &mcpendpoint.Options{
		Limiter: a.Limiter(), AddrKey: auth.AddrKey, AllowedOrigins: cfg.AllowedOrigins,
		Logger: logger.With("surface", "mcp"), Version: host.Version,
		// Revocations reach CloseToken at once, so a short cache is safe.
		VerifyCacheTTL: 5 * time.Second,
	})
	if err != nil {
		return fail(err)
	}
	s.cancelRev = a.OnRevoke(s.ep.CloseToken)
	ui := web.New(h, a, &web.Options{
		Logger: logger.With("surface", "web"), Secure: cfg.TLS.CertFile != "", MCPURL: base + "/mcp",
		MCPSessions: s.ep.Sessions,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.ep)
	mux.Handle("/mcp/", s.ep)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/", ui)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if cfg.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.Resolve(cfg.TLS.CertFile), cfg.Resolve(cfg.TLS.KeyFile))
		if err != nil {
			return fail(fmt.Errorf("tls: %w", err))
		}
		s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, s.srv.TLSConfig)
	}
	s.ctl, err = control.Serve(cfg.DataPath(), h, &web.TokenAdmin{Store: a, BaseURL: func() string { return base }}, logger)
	if err != nil {
		return fail(err)
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	return s, nil
}

func scheme(cfg *host.Config) string {
	if cfg.TLS.CertFile != "" {
		return "https"
	}
	return "http"
}

// SocketPath returns the control socket's path.
func (s *Surface) SocketPath() string { return s.ctl.Path() }

// Close stops the HTTP server (waiting up to 5 s for requests in flight),
// the MCP sessions, the control socket and the token store.
func (s *Surface) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Open MCP sessions hold streams: end them first so Shutdown can finish.
	s.ep.Close()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	s.cancelRev()
	return errors.Join(err, s.serveErr, s.ctl.Close(), s.Auth.Close())
}

// verifier adapts the token store to the MCP endpoint: operator tokens are
// not user tokens, and a store failure is "cannot decide", not "invalid".
type verifier struct{ s *auth.Store }

func (v verifier) Verify(ctx context.Context, tok string) (mcpendpoint.Principal, error) {
	p, err := v.s.Verify(ctx, tok)
	switch {
	case errors.Is(err, auth.ErrInvalidToken):
		return mcpendpoint.Principal{}, err
	case err != nil:
		return mcpendpoint.Principal{}, fmt.Errorf("%w: %v", mcpendpoint.ErrUnavailable, err)
	case p.Operator:
		return mcpendpoint.Principal{}, fmt.Errorf("an operator token is not a user's: %w", auth.ErrInvalidToken)
	}
	return mcpendpoint.Principal{User: p.User, TokenID: p.TokenID}, nil
}
