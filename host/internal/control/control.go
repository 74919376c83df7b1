package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/test/bufconn"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
	"github.com/agenthost/agenthost/host/internal/limits"
	"github.com/agenthost/agenthost/host/internal/oauthflow"
	"github.com/agenthost/agenthost/settings"
)

// SocketName is the socket's file name inside the data folder.
const SocketName = "agenthost.sock"

// Host is what the control socket serves of the host (*host.Host is one;
// so is [Client], for a host in another process). Its methods are called
// concurrently; see package host for what each does.
type Host interface {
	api.Tools
	api.Settings
	api.Status
	Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error)
}

// Tokens is the token and login-link administration the CLI reaches
// through the socket. It may be nil (the verbs then fail clearly).
type Tokens interface {
	CreateToken(ctx context.Context, user, name string, operator bool) (plaintext string, info TokenInfo, err error)
	// CreateScopedToken issues a user's token narrowed to a scope and/or
	// an expiry (at least one set).
	CreateScopedToken(ctx context.Context, user, name string, scope *ext.Scope, expires time.Time) (plaintext string, info TokenInfo, err error)
	ListTokens(ctx context.Context, user string) ([]TokenInfo, error)
	RevokeToken(ctx context.Context, id string) error
	CreateLoginLink(ctx context.Context, user string) (url string, err error)
}

// Auth starts OAuth sign-ins of extensions and waits for them (the
// host's [oauthflow.Flows]). It may be nil (the verbs then fail clearly).
type Auth interface {
	Begin(ctx context.Context, user, extName, name string) (*oauthflow.Started, error)
	Wait(ctx context.Context, state string) (*oauthflow.Result, error)
}

// TokenInfo describes a token; never its value.
type TokenInfo struct {
	ID       string    `json:"id"`
	User     string    `json:"user,omitempty"`
	Operator bool      `json:"operator,omitempty"`
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"lastUsed,omitzero"`
	// Scope, when set, is what the token reaches (nil: all its user has).
	Scope *ext.Scope `json:"scope,omitempty"`
	// Expires, when set, is when it stops working; Expired says it has.
	Expires time.Time `json:"expires,omitzero"`
	Expired bool      `json:"expired,omitempty"`
	// Extension names the extension that minted it, if one did.
	Extension string `json:"extension,omitempty"`
}

// ProcessOwner is implemented by a [Host] that runs processes of its own
// (*host.Host: its service processes): [Serve] refuses connections from
// them and from what they started, whatever their uid.
type ProcessOwner interface {
	ServiceProcess(pid int) bool
}

// ActionHost is implemented by a [Host] that routes actions to its
// extensions (*host.Host): the control API then serves them (POST
// /v1/actions), as the operator's.
type ActionHost interface {
	RunAction(ctx context.Context, caller, extName, user, name, action string) (string, error)
}

// Auditor is implemented by a [Host] that keeps the audit log
// (*host.Host): the control API then serves it (GET /v1/audit).
type Auditor interface {
	Audit(ctx context.Context, f audit.Filter) ([]audit.Record, error)
}

// Reloader is implemented by a [Host] that re-reads the operator's file
// in place (*host.Host): the control API then serves POST /v1/reload
// (`agenthost reload`).
type Reloader interface {
	Reload(ctx context.Context) (*api.ReloadResult, error)
}

// Fleeter is implemented by a [Host] that keeps the fleet view
// (*host.Host): the control API then serves GET /v1/fleet.
type Fleeter interface {
	Fleet(ctx context.Context) ([]api.FleetEntry, error)
}

// Server serves the control API on a unix socket.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	path string
	done chan struct{}
	err  error
}

// Serve listens on the socket in dataDir and serves h (and tokens and
// auth, which may be nil) until Close. Peers must run as the host's user
// and, when h is a [ProcessOwner], be none of its processes. A stale
// socket from a dead host is replaced; a live one is an error (another
// host runs on this data folder).
func Serve(dataDir string, h Host, tokens Tokens, auth Auth, logger *slog.Logger) (*Server, error) {
	path := filepath.Join(dataDir, SocketName)
	if c, err := net.DialTimeout("unix", path, 500*time.Millisecond); err == nil {
		_ = c.Close()
		return nil, fmt.Errorf("another agenthost is running on %s (its control socket answers)", dataDir)
	}
	_ = os.Remove(path)
	// The data folder is 0700, so the socket is unreachable to others even
	// before the chmod below.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on the control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, err
	}
	owner, _ := h.(ProcessOwner)
	return start(peerCheck{Listener: ln, owner: owner, logger: logger}, path, h, tokens, auth, logger), nil
}

// Pipe serves h (and tokens and auth, which may be nil) on an in-memory listener,
// with no socket in the filesystem, and returns a client of it: how the
// CLI reaches a host it runs in its own process, through the very API a
// running host serves on its socket. Close the client, then the server.
func Pipe(h Host, tokens Tokens, auth Auth, logger *slog.Logger) (*Client, *Server) {
	ln := bufconn.Listen(256 << 10)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return ln.DialContext(ctx)
	}}
	return &Client{hc: &http.Client{Transport: tr}}, start(ln, "", h, tokens, auth, logger)
}

// start serves the control API on ln until Close.
func start(ln net.Listener, path string, h Host, tokens Tokens, auth Auth, logger *slog.Logger) *Server {
	s := &Server{
		ln: ln, path: path, done: make(chan struct{}),
		srv: &http.Server{Handler: Handler(h, tokens, auth), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)},
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s
}

// Path returns the socket's path ("" for a [Pipe]).
func (s *Server) Path() string { return s.path }

// Close stops serving, waits for in-flight requests (up to 5 s) and removes
// the socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if s.path != "" {
		_ = os.Remove(s.path)
	}
	return errors.Join(err, s.err)
}

// errorBody is the API's error shape.
type errorBody struct {
	Error  string       `json:"error"`
	Code   string       `json:"code"`
	Fields []fieldError `json:"fields,omitempty"`
	// RetryAfterMs is when to try again, for code "rate_limited" (HTTP
	// 429 with Retry-After).
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

var codes = []struct {
	code string
	err  error
	http int
}{
	{"not_found", ext.ErrNotFound, http.StatusNotFound},
	{"permission_denied", ext.ErrPermission, http.StatusForbidden},
	{"unavailable", ext.ErrUnavailable, http.StatusServiceUnavailable},
	{"invalid_argument", ext.ErrInvalidArgument, http.StatusBadRequest},
	{"unimplemented", ext.ErrUnimplemented, http.StatusNotImplemented},
}

func writeError(w http.ResponseWriter, err error) {
	body := errorBody{Error: err.Error(), Code: "internal"}
	status := http.StatusInternalServerError
	var limited *limits.Refusal
	if errors.As(err, &limited) {
		body.Code, body.RetryAfterMs = "rate_limited", limited.RetryAfterMs()
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfterSeconds()))
		writeJSON(w, http.StatusTooManyRequests, body)
		return
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			body.Code, status = c.code, c.http
			break
		}
	}
	var fe settings.FieldErrors
	if errors.As(err, &fe) {
		for _, f := range fe {
			body.Fields = append(body.Fields, fieldError{Field: f.Field, Message: f.Msg})
		}
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeError turns an error body back into an error that wraps the
// matching sentinel (and settings.FieldErrors).
func decodeError(status int, r io.Reader) error {
	var b errorBody
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&b); err != nil || b.Error == "" {
		return fmt.Errorf("the running host answered HTTP %d", status)
	}
	var errs []error
	if len(b.Fields) > 0 {
		var fe settings.FieldErrors
		for _, f := range b.Fields {
			fe = append(fe, &settings.FieldError{Field: f.Field, Msg: f.Message})
		}
		errs = append(errs, fe)
	}
	for _, c := range codes {
		if c.code == b.Code {
			errs = append(errs, c.err)
		}
	}
	if b.Code == "rate_limited" {
		errs = append(errs, limits.ErrLimited, ext.ErrBusy)
	}
	return &remoteError{msg: b.Error, errs: errs}
}

type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }
