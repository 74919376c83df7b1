package extmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// newHTTPTransport returns the transport every remote connection of one
// extension shares: keep-alive pools sized for many concurrent calls to
// one server (Go's default keeps only 2 idle connections per host).
func newHTTPTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// authTransport sets a remote server's headers on each request: the
// configured ones (without Authorization, for personal servers) and
// `Bearer <token>` when there is a token. Authorization goes only to the
// server's own origin, never to a host it redirects to.
type authTransport struct {
	base    http.RoundTripper
	origin  string // scheme://host[:port] of the configured URL
	headers http.Header
	token   string
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("Authorization") // only ours goes out
	for k, v := range t.headers {
		r.Header[k] = v
	}
	if t.token != "" {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	if originOf(r.URL) != t.origin {
		r.Header.Del("Authorization")
	}
	return t.base.RoundTrip(r)
}

func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// connector connects to MCP servers with go-sdk: stdio servers through the
// host's per-user services, remote ones over Streamable HTTP or SSE.
type connector struct{ x *Extension }

var _ catalog.Connector = (*connector)(nil)

// credential returns the token server d uses for user, and whether it
// replaces the configured Authorization and MCP_ACCESS_TOKEN.
//
// A personal server gets the user's secret token:S, or none: a configured
// token is never a fallback. A shared server gets the operator's
// credential (the secret token:S of [OperatorUser]), and only for a user
// on its allowlist; without an operator secret, its configured headers and
// environment stay as written.
func (x *Extension) credential(ctx context.Context, h ext.Host, user string, d catalog.ServerDecl) (token string, replace bool, err error) {
	if user == "" {
		return "", false, fmt.Errorf("caller not identified: %w", ext.ErrPermission)
	}
	owner := user
	if d.Credentials == catalog.CredentialsShared {
		if !slices.Contains(d.Users, user) {
			return "", false, fmt.Errorf("user %q may not use the shared server %q: %w", user, d.Name, ext.ErrPermission)
		}
		owner = OperatorUser
	}
	tok, err := h.UserStore(owner).Secrets().Get(ctx, TokenSecret(d.Name))
	switch {
	case errors.Is(err, ext.ErrNotFound):
		return "", d.Credentials != catalog.CredentialsShared, nil
	case err != nil:
		return "", false, fmt.Errorf("reading the token for %q: %w", d.Name, err)
	}
	return tok, true, nil
}

// Connect implements [catalog.Connector].
func (c *connector) Connect(ctx context.Context, user string, d catalog.ServerDecl, onToolsChanged func()) (catalog.Conn, error) {
	x := c.x
	sp, ok := d.Spec.(*spec)
	if !ok {
		return nil, fmt.Errorf("server %q has no MCP spec", d.Name)
	}
	h, err := x.hostRef()
	if err != nil {
		return nil, err
	}
	token, replace, err := x.credential(ctx, h, user, d)
	if err != nil {
		return nil, err
	}
	cn := &conn{server: d.Name, done: make(chan struct{})}
	if token != "" {
		cn.secrets = []string{token}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agenthost-ext-mcp", Version: Version}, &mcp.ClientOptions{
		Logger:                 x.log.With("server", d.Name, "user", user),
		Capabilities:           &mcp.ClientCapabilities{}, // no roots, no sampling
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { onToolsChanged() },
	})
	var transport mcp.Transport
	s := sp.server
	if s.URL == "" {
		svc, err := h.ConnectService(ctx, x.serviceName(d.Name), user)
		if err != nil {
			return nil, cn.redact(fmt.Errorf("starting the server: %w", err))
		}
		cn.svc = svc
		// The host owns the process: closing the session must not close
		// its stdin (Release does, and stops the process).
		transport = &mcp.IOTransport{Reader: svc.Stdout(), Writer: nopCloser{svc.Stdin()}}
	} else {
		u, err := url.Parse(s.URL)
		if err != nil {
			return nil, fmt.Errorf("the url does not parse")
		}
		hdr := http.Header{}
		for k, v := range s.Headers {
			if replace && isAuthorization(k) {
				continue
			}
			hdr.Set(k, v)
		}
		if !replace {
			// The configured Authorization of a shared server without an
			// operator secret stays; keep it out of errors too.
			for k, v := range s.Headers {
				if isAuthorization(k) {
					_, cred, _ := strings.Cut(strings.TrimSpace(v), " ")
					cn.secrets = append(cn.secrets, v, strings.TrimSpace(cred))
				}
			}
		}
		hc := &http.Client{Transport: &authTransport{base: x.transport, origin: originOf(u), headers: hdr, token: token}}
		if s.Type == "sse" {
			transport = &mcp.SSEClientTransport{Endpoint: s.URL, HTTPClient: hc}
		} else {
			transport = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc}
		}
	}
	pv := s.ProtocolVersion
	switch pv {
	case "":
		pv = x.defaultProtocol
	case ProtocolLatest:
		pv = ""
	}
	// Some transports (SSE) keep the Connect context for their stream: give
	// them one that lives as long as the connection, and cut it only while
	// connecting if ctx ends.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	cs, err := client.Connect(lctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: pv})
	if !stop() && err == nil {
		err = ctx.Err() // ctx ended just as the connection was made
		_ = cs.Close()
	}
	if err != nil {
		cancel()
		if cn.svc != nil {
			_ = cn.svc.Release()
		}
		return nil, cn.redact(explainConnect(err))
	}
	cn.cancel = cancel
	cn.cs = cs
	if r := cs.InitializeResult(); r != nil {
		cn.protocol = r.ProtocolVersion
	}
	go cn.wait()
	return cn, nil
}

// explainConnect says in plain words why a connection could not be made,
// keeping the detail.
func explainConnect(err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, mcp.ErrConnectionClosed):
		return fmt.Errorf("the server exited or closed the connection before answering (see its log): %w", err)
	case errors.As(err, &syn), strings.Contains(err.Error(), "invalid character"):
		return fmt.Errorf("the server wrote something that is not MCP JSON-RPC (a banner or log line on stdout?): %w", err)
	}
	return err
}

// nopCloser keeps a process's stdin open when the session closes.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// conn is one go-sdk client session to one server for one user.
type conn struct {
	server   string
	cs       *mcp.ClientSession
	svc      ext.ServiceConn // stdio servers only
	secrets  []string        // redacted from every error
	protocol string
	cancel   context.CancelFunc // ends the connection's context
	done     chan struct{}

	mu      sync.Mutex
	err     error
	closing bool
	closeMu sync.Mutex
	closed  bool
}

var _ catalog.Conn = (*conn)(nil)

// wait watches the session until it ends; Close joins it.
func (c *conn) wait() {
	err := c.cs.Wait()
	c.mu.Lock()
	if !c.closing {
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		c.err = c.redact(err)
	}
	c.mu.Unlock()
	close(c.done)
}

// Done implements [catalog.Conn].
func (c *conn) Done() <-chan struct{} { return c.done }

// Err implements [catalog.Conn].
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close implements [catalog.Conn]: it ends the session, waits for its
// watcher and releases the process (stdio).
func (c *conn) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	err := c.cs.Close()
	<-c.done
	c.cancel()
	if c.svc != nil {
		err = errors.Join(err, c.svc.Release())
	}
	if errors.Is(err, mcp.ErrConnectionClosed) {
		err = nil
	}
	return c.redact(err)
}

// ListTools implements [catalog.Conn]: every page, schemas kept raw.
func (c *conn) ListTools(ctx context.Context) ([]catalog.ToolInfo, error) {
	var out []catalog.ToolInfo
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, c.redact(err)
		}
		info := catalog.ToolInfo{Name: t.Name, Title: t.Title, Description: t.Description}
		var err error
		if info.InputSchema, err = rawJSON(t.InputSchema); err != nil {
			return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
		}
		if info.OutputSchema, err = rawJSON(t.OutputSchema); err != nil {
			return nil, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
		}
		if t.Annotations != nil {
			if info.Annotations, err = json.Marshal(t.Annotations); err != nil {
				return nil, fmt.Errorf("tool %q: annotations: %w", t.Name, err)
			}
		}
		if info.Title == "" && t.Annotations != nil {
			info.Title = t.Annotations.Title
		}
		out = append(out, info)
	}
	return out, nil
}

func rawJSON(v any) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return v, nil
	}
	return json.Marshal(v)
}

var emptyArgs = json.RawMessage("{}")

// CallTool implements [catalog.Conn]. Arguments go out raw; the result's
// content is marshalled once, as go-sdk decoded it. A protocol error (such
// as -32602 for an unknown tool) is an error result naming the server.
func (c *conn) CallTool(ctx context.Context, _ string, tool string, args json.RawMessage) (*ext.CallToolResult, error) {
	if isEmpty(args) {
		args = emptyArgs
	}
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		var werr *jsonrpc.Error
		if errors.As(err, &werr) {
			return ext.ErrorResult("MCP server %q refused the call of %q: %s (code %d)", c.server, tool,
				c.redactString(werr.Message), werr.Code), nil
		}
		return nil, c.redact(err)
	}
	return toResult(res)
}

// toResult maps a go-sdk result to ext's raw form.
func toResult(res *mcp.CallToolResult) (*ext.CallToolResult, error) {
	out := &ext.CallToolResult{IsError: res.IsError}
	content := res.Content
	if content == nil {
		content = []mcp.Content{}
	}
	var err error
	if out.Content, err = json.Marshal(content); err != nil {
		return nil, fmt.Errorf("encoding the result's content: %w", err)
	}
	if res.StructuredContent != nil {
		if out.StructuredContent, err = rawJSON(res.StructuredContent); err != nil {
			return nil, fmt.Errorf("encoding the structured content: %w", err)
		}
	}
	if len(res.Meta) > 0 {
		if meta, err := json.Marshal(map[string]any{"_meta": res.Meta}); err == nil {
			out.Details = meta
		}
	}
	return out, nil
}

// redact removes the connection's secrets from err's text; errors.Is
// still sees the original.
func (c *conn) redact(err error) error {
	if err == nil {
		return nil
	}
	msg := c.redactString(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

func (c *conn) redactString(s string) string {
	for _, sec := range c.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
