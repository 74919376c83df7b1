//lint:file-ignore SA1019 roots, sampling and logging are deprecated from MCP 2026-07-28 but still spoken by the 2025-11-25 servers and clients ext-mcp relays (issue 9).

package extmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/ext/netguard"
)

// newHTTPTransport returns the transport the operator's remote servers
// share, dialing through p: keep-alive pools sized for many concurrent
// calls to one server (Go's default keeps only 2 idle connections per
// host).
func newHTTPTransport(p *netguard.Policy) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           p.Dialer(10 * time.Second).DialContext,
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
	oauth   bool // the request's Authorization is the OAuth handler's: keep it
	// secretHeaders hold a user's secret inputs (a catalog server's): like
	// Authorization, they go to the configured origin only.
	secretHeaders []string
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	var keep string
	if t.oauth {
		keep = r.Header.Get("Authorization")
	}
	r.Header.Del("Authorization") // only ours goes out
	for k, v := range t.headers {
		r.Header[k] = v
	}
	switch {
	case t.token != "":
		r.Header.Set("Authorization", "Bearer "+t.token)
	case keep != "":
		r.Header.Set("Authorization", keep)
	}
	if originOf(r.URL) != t.origin {
		r.Header.Del("Authorization")
		for _, k := range t.secretHeaders {
			r.Header.Del(k)
		}
	}
	return t.base.RoundTrip(r)
}

func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// connector connects to MCP servers with go-sdk: stdio servers through the
// host's per-user services, remote ones over Streamable HTTP or SSE, as
// one config says (its guard and size limit).
type connector struct {
	x         *Extension
	guard     *guard
	maxResult int64 // the config's maxResultBytes
}

// limit is the bound on one message from server s.
func (c *connector) limit(s Server) int64 {
	if s.MaxResultBytes > 0 {
		return s.MaxResultBytes
	}
	return c.maxResult
}

var _ catalog.Connector = (*connector)(nil)

// ownerOf returns whose credential user uses on d: the user's own on a
// personal server; the operator's ([OperatorUser]) on a shared server, and
// only for a user on its allowlist, by name or by one of groups.
func ownerOf(user string, groups []string, d catalog.ServerDecl) (string, error) {
	if user == "" {
		return "", fmt.Errorf("caller not identified: %w", ext.ErrPermission)
	}
	if d.Credentials == catalog.CredentialsShared {
		if user != OperatorUser && !catalog.Lends(d.Users, user, groups) {
			return "", fmt.Errorf("user %q may not use the shared server %q: %w", user, d.Name, ext.ErrPermission)
		}
		return OperatorUser, nil
	}
	return user, nil
}

// ownerSpec binds d's spec to the credential owner keeps for it.
//
// A personal server gets the user's secret token:S, or none: a configured
// token is never a fallback. A shared server gets the operator's
// credential (the secret token:S of [OperatorUser]); without an operator
// secret, its configured headers and environment stay as written. A
// remote Streamable HTTP server without a token uses owner's OAuth grant
// (GrantSecret) when there is one; one made for another URL is dead.
func (x *Extension) ownerSpec(ctx context.Context, h ext.Host, owner string, d catalog.ServerDecl) (*userSpec, error) {
	var sp *spec
	switch v := d.Spec.(type) {
	case *spec:
		sp = v
	case *userSpec:
		sp = v.spec
	default:
		return nil, fmt.Errorf("server %q has no MCP spec", d.Name)
	}
	us := &userSpec{spec: sp, owner: owner}
	if sp.entry != nil && owner != OperatorUser {
		// A server added from the catalog: each secret input is the
		// user's secret (input:<server>:<input>, or the token token:<server>,
		// which may stand in other values too); "" when not set.
		for _, in := range sp.entry.Inputs {
			if !in.IsSecret {
				continue
			}
			name := sp.entry.secretName(d.Name, in)
			v, err := readSecret(ctx, h, owner, name)
			switch {
			case errors.Is(err, ext.ErrNotFound) || (err == nil && v == ""):
				if in.IsRequired {
					us.missing = append(us.missing, [2]string{in.Name, name})
				}
				v = ""
			case err != nil:
				return nil, fmt.Errorf("reading the secret input %q for %q: %w", in.Name, d.Name, err)
			}
			if us.inputs == nil {
				us.inputs = map[string]string{}
			}
			us.inputs[in.Name] = v
		}
	}
	tok, err := readSecret(ctx, h, owner, TokenSecret(d.Name))
	switch {
	case errors.Is(err, ext.ErrNotFound):
		us.replace = d.Credentials != catalog.CredentialsShared
	case err != nil:
		return nil, fmt.Errorf("reading the token for %q: %w", d.Name, err)
	default:
		us.token, us.replace = tok, true
		return us, nil
	}
	if sp.server.URL == "" || sp.server.Type == "sse" || sp.server.clientCredentials() {
		return us, nil // no grant: a token, or the client credentials' own source
	}
	g, err := x.loadGrant(ctx, h, owner, d.Name)
	if err != nil || g == nil {
		return us, err
	}
	if g.Dead == "" && g.Resource != sp.server.URL {
		g = g.dead(fmt.Sprintf("the address of MCP server %q changed since you signed in", d.Name))
	}
	us.grant, us.replace = g, true
	return us, nil
}

// Connect implements [catalog.Connector].
//
// The client declares sampling, elicitation (form and URL) and roots, so
// servers keep the tools that need them; what a server asks is relayed to
// the client session of the call it belongs to (see [conn.session]), which
// may refuse for want of the capability.
func (c *connector) Connect(ctx context.Context, user string, d catalog.ServerDecl, onChanged func()) (catalog.Conn, error) {
	ctx = withSnapshot(ctx, user, nil) // the connection reads the store (snapshot.go)
	x := c.x
	h, err := x.hostRef()
	if err != nil {
		return nil, err
	}
	// The plan bound the credential it read; it is not read again.
	us, err := x.bound(ctx, h, user, d)
	if err != nil {
		return nil, err
	}
	if err := us.needsInputs(d.Name); err != nil {
		return nil, err
	}
	token, replace := us.token, us.replace
	cn := &conn{x: x, host: h, user: user, server: d.Name, limit: c.limit(us.server), done: make(chan struct{}), active: map[*activeCall]struct{}{}}
	cn.secrets = us.secretValues()
	client := mcp.NewClient(&mcp.Implementation{Name: "agenthost-ext-mcp", Version: Version}, &mcp.ClientOptions{
		Logger: x.log.With("server", d.Name, "user", user),
		Capabilities: &mcp.ClientCapabilities{
			Sampling:    &mcp.SamplingCapabilities{},
			Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}},
			RootsV2:     &mcp.RootCapabilities{ListChanged: true},
		},
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { onChanged() },
		PromptListChangedHandler:    func(context.Context, *mcp.PromptListChangedRequest) { onChanged() },
		ResourceListChangedHandler:  func(context.Context, *mcp.ResourceListChangedRequest) { onChanged() },
		LoggingMessageHandler:       cn.logMessage,
		ResourceUpdatedHandler:      cn.resourceUpdated,
		ProgressNotificationHandler: cn.progress,
	})
	client.AddReceivingMiddleware(cn.serverRequests)
	var transport mcp.Transport
	s := us.server
	var hc *http.Client
	var oa auth.OAuthHandler
	if s.URL == "" {
		// The spec goes with the connect: the host need not ask for it.
		spec, err := x.processSpec(ctx, h, d.Name, user, us)
		if err != nil {
			return nil, err
		}
		cn.output = newOutputRedactor(spec, us.secretValues()...)
		cn.operatorsOutput = us.owner == OperatorUser && user != OperatorUser && !s.ShowOutputToUsers
		svc, err := h.ConnectServiceSpec(ctx, x.serviceName(d.Name), user, spec)
		if err != nil {
			if sf := cn.startFailure(spec.Command, err); sf != nil {
				x.repeats.Warn("a stdio MCP server could not start", user, d.Name, cn.redact(err).Error())
				return nil, sf
			}
			return nil, cn.redact(fmt.Errorf("starting the server: %w", err))
		}
		cn.svc = svc
		// The host owns the process: closing the session must not close
		// its stdin (Release does, and stops the process).
		cn.stdio = newStdioConn(svc.Stdout(), svc.Stdin(), d.Name, c.limit(s), x.log)
		transport = stdioTransport{cn.stdio}
	} else {
		if err := c.guard.check(d.Name, s.URL, us.own); err != nil {
			return nil, err
		}
		u, err := url.Parse(s.URL)
		if err != nil {
			return nil, fmt.Errorf("the url does not parse")
		}
		hdr := http.Header{}
		var secretHeaders []string // sent to the server's origin only
		for k, v := range s.Headers {
			if replace && isAuthorization(k) {
				continue
			}
			filled := withSecrets(expand(v, user, ""), us.inputs)
			if filled != expand(v, user, "") {
				secretHeaders = append(secretHeaders, k)
			}
			hdr.Set(k, filled)
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
		switch {
		case token != "" || s.Type == "sse":
		case s.clientCredentials():
			// The operator's client credentials: the shared source's
			// token, obtained without anybody signing in.
			oa = &ccAuth{src: x.ccSourceFor(d.Name, s)}
		default:
			// Signed in with OAuth, or not yet: the grant's token, renewed
			// on a 401; without a usable grant, "needs sign-in".
			ca, err := x.connAuthFor(us.owner, d, us.grant)
			if err != nil {
				return nil, err
			}
			oa = ca
		}
		hc = &http.Client{Transport: capBodies(&authTransport{base: c.guard.transport(us.own), origin: originOf(u), headers: hdr, token: token,
			oauth: oa != nil, secretHeaders: secretHeaders}, d.Name, c.limit(s))}
		switch {
		case s.Type == "sse":
			transport = &mcp.SSEClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxEventSize: int(c.limit(s))}
		case oa != nil:
			transport = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxEventSize: int(c.limit(s)), OAuthHandler: oa}
		default:
			transport = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxEventSize: int(c.limit(s))}
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
		var pf error
		if ctx.Err() == nil { // a timeout is its own reason: the process may still run
			pf = cn.processFailure(true) // before the release, which ends the handle
		}
		cn.release()
		if gerr := explain(d.Name, us.own, err); gerr != nil {
			return nil, gerr
		}
		if pf != nil {
			x.repeats.Warn("a stdio MCP server failed before answering", user, d.Name, cn.redact(err).Error())
			return nil, pf
		}
		return nil, cn.redact(explainConnect(err))
	}
	cn.cancel = cancel
	cn.cs = cs
	init := cs.InitializeResult()
	if init != nil {
		cn.protocol = init.ProtocolVersion
		cn.init = init
	}
	if s.URL != "" && s.Type != "sse" && cn.protocol != "" && cn.protocol <= mcpwire.LatestSessionRevision {
		// A session-bound revision: ext-mcp's own requests go as POSTs in
		// go-sdk's session.
		cn.http = &httpRaw{url: s.URL, server: d.Name, limit: c.limit(s), hc: hc, session: cs.ID(), protocol: cn.protocol, lost: func() { _ = cs.Close() }}
		if oa != nil {
			cn.http.auth = oa
		}
	}
	if init != nil && init.Capabilities != nil && init.Capabilities.Logging != nil {
		// Every message comes to ext-mcp; each client session filters by
		// its own level.
		if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			x.log.Warn("setting the log level of a server failed", "server", d.Name, "user", user, "error", cn.redact(err))
		}
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

// conn is one connection to one server for one user: a go-sdk client
// session, and beside it ext-mcp's own requests on the same connection
// (stdio) or in the same session (Streamable HTTP), whose results stay raw.
type conn struct {
	x       *Extension
	host    ext.Host
	user    string
	server  string
	limit   int64 // bounds each message from the server (limits.go)
	cs      *mcp.ClientSession
	init    *mcp.InitializeResult
	svc     ext.ServiceConn // stdio servers only
	stdio   *stdioConn      // stdio servers only
	http    *httpRaw        // Streamable HTTP servers on a session-bound revision
	secrets []string        // redacted from every error
	// output redacts what a stdio server's process wrote (failure.go);
	// operatorsOutput: what it wrote is for the operator only.
	output          *outputRedactor
	operatorsOutput bool
	protocol        string
	cancel          context.CancelFunc // ends the connection's context
	done            chan struct{}

	mu      sync.Mutex
	err     error
	closing bool
	closeMu sync.Mutex
	closed  bool

	amu    sync.Mutex
	seq    uint64
	active map[*activeCall]struct{} // requests in flight with a client session
}

// activeCall is a request in flight and the client session behind it.
type activeCall struct {
	sess  ext.Session
	token string // the progress token it gave the server, if any
	seq   uint64
}

var (
	_ catalog.Conn        = (*conn)(nil)
	_ catalog.FeatureConn = (*conn)(nil)
)

// track records a request in flight; the returned func ends it.
func (c *conn) track(sess ext.Session, token string) func() {
	a := &activeCall{sess: sess, token: token}
	c.amu.Lock()
	c.seq++
	a.seq = c.seq
	c.active[a] = struct{}{}
	c.amu.Unlock()
	return func() {
		c.amu.Lock()
		delete(c.active, a)
		c.amu.Unlock()
	}
}

// session returns the client session a server's request that names no
// request of ours belongs to: the most recent request in flight (stdio
// carries no link between a server's request and the call that caused it;
// with several calls at once this is a documented best guess), else nil.
func (c *conn) session() ext.Session {
	c.amu.Lock()
	defer c.amu.Unlock()
	var best *activeCall
	for a := range c.active {
		if best == nil || a.seq > best.seq {
			best = a
		}
	}
	if best == nil {
		return nil
	}
	return best.sess
}

// ask relays a server's request to the client: the session of the request
// it belongs to, else the user's most recent client session through the
// host.
//
// Roots belong to the client, not to a call: when the guessed call ended
// before the client could answer (a server often asks for roots after
// roots/list_changed, unrelated to the call in flight), the user's most
// recent client session is asked instead. Sampling and elicitation of an
// ended call are not moved to another session.
func (c *conn) ask(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if s := c.session(); s != nil {
		res, err := s.Request(ctx, method, params)
		if err == nil || method != ext.MethodListRoots || !errors.Is(err, ext.ErrUnavailable) {
			return res, err
		}
	}
	return c.host.RequestUser(ctx, c.user, method, params)
}

// serverRequests is go-sdk middleware that answers a server's sampling,
// elicitation and roots requests by asking the client (see ask).
func (c *conn) serverRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		var out mcp.Result
		switch method {
		case ext.MethodListRoots:
			out = &mcp.ListRootsResult{}
		case ext.MethodCreateMessage:
			out = &mcp.CreateMessageResult{}
		case ext.MethodElicit:
			out = &mcp.ElicitResult{}
		default:
			return next(ctx, method, req)
		}
		params, err := json.Marshal(req.GetParams())
		if err != nil {
			return nil, err
		}
		res, err := c.ask(ctx, method, params)
		if err != nil {
			return nil, toWireError(err)
		}
		if err := json.Unmarshal(res, out); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client's answer does not parse: " + err.Error()}
		}
		return out, nil
	}
}

// logMessage hands a server's log message to the user's client sessions,
// its logger prefixed with the server's name.
func (c *conn) logMessage(ctx context.Context, req *mcp.LoggingMessageRequest) {
	p := *req.Params
	if p.Logger == "" {
		p.Logger = c.server
	} else {
		p.Logger = c.server + "/" + p.Logger
	}
	b, err := json.Marshal(&p)
	if err != nil {
		return
	}
	_ = c.host.Notify(ctx, c.user, ext.MethodLogMessage, json.RawMessage(c.redactString(string(b))))
}

// resourceUpdated hands a server's resource update to the user's sessions.
func (c *conn) resourceUpdated(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	b, err := json.Marshal(map[string]string{"uri": req.Params.URI})
	if err != nil {
		return
	}
	_ = c.host.Notify(ctx, c.user, ext.MethodResourceUpdated, b)
}

// progress routes progress of a request sent through go-sdk (SSE
// transport, stateless revisions) to its session.
func (c *conn) progress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok, _ := req.Params.ProgressToken.(string)
	if tok == "" {
		return
	}
	c.amu.Lock()
	var sess ext.Session
	for a := range c.active {
		if a.token == tok {
			sess = a.sess
		}
	}
	c.amu.Unlock()
	if sess == nil {
		return
	}
	p := *req.Params
	b, err := json.Marshal(&p)
	if err == nil {
		_ = sess.Notify(ctx, ext.MethodProgress, b)
	}
}

// raw sends one request of ext-mcp's own with its result kept raw, or
// reports that this connection has no such path (ok false).
func (c *conn) raw(ctx context.Context, method string, params func(token string) ([]byte, error), sess ext.Session) (res json.RawMessage, ok bool, err error) {
	switch {
	case c.stdio != nil:
		res, err = c.stdio.call(ctx, method, params, sess)
	case c.http != nil:
		res, err = c.http.call(ctx, method, params, sess)
	default:
		return nil, false, nil
	}
	return res, true, err
}

// notify sends a notification of ext-mcp's own, where it has a path.
func (c *conn) notify(ctx context.Context, method string, params json.RawMessage) error {
	switch {
	case c.stdio != nil:
		return c.stdio.notify(method, params)
	case c.http != nil:
		return c.http.notify(ctx, method, params)
	}
	return nil
}

// release gives back the service process (stdio) and waits for the
// stdio reader.
func (c *conn) release() {
	if c.svc != nil {
		_ = c.svc.Release()
	}
	if c.stdio != nil {
		_ = c.stdio.Close()
		c.stdio.wait()
	}
}

// wait watches the session until it ends; Close joins it.
func (c *conn) wait() {
	err := c.cs.Wait()
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	var pf error
	if !closing {
		pf = c.processFailure(false)
	}
	c.mu.Lock()
	if !c.closing {
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		if pf != nil {
			c.x.log.Warn("a stdio MCP server failed", "server", c.server, "user", c.user, "error", c.redact(err))
			c.err = pf
		} else {
			c.err = c.redact(explainConnect(err))
		}
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
	if c.stdio != nil {
		_ = c.stdio.Close()
		c.stdio.wait()
	}
	if c.http != nil {
		c.http.close()
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
		if info.Execution, info.Icons, info.Meta, err = toolExtras(t); err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		if info.Title == "" && t.Annotations != nil {
			info.Title = t.Annotations.Title
		}
		out = append(out, info)
	}
	return out, nil
}

// toolExtras returns a tool's execution, icons and _meta as raw JSON:
// go-sdk keeps what it does not model in the tool's JSON form, so the tool
// is marshalled once and those members taken from it.
func toolExtras(t *mcp.Tool) (execution, icons, meta json.RawMessage, err error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, nil, nil, err
	}
	var m struct {
		Execution json.RawMessage `json:"execution"`
		Icons     json.RawMessage `json:"icons"`
		Meta      json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, nil, err
	}
	return m.Execution, m.Icons, m.Meta, nil
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

// CallTool implements [catalog.Conn]. On stdio and session-bound HTTP the
// call is ext-mcp's own request: arguments go out raw, the result comes
// back raw and is handed on as it is ([ext.CallToolResult.Raw]); progress
// (when the client asked for it) and the server's requests reach
// req.Session. Otherwise go-sdk carries it. A protocol error (such as
// -32602 for an unknown tool) is an error result naming the server.
func (c *conn) CallTool(ctx context.Context, req *ext.CallToolRequest) (res *ext.CallToolResult, err error) {
	if c.x != nil && c.x.tel != nil {
		t := c.x.tel
		var end func(string)
		ctx, req, end = t.startCall(ctx, c.server, req)
		defer func() { end(callErrorType(res, err)) }()
	}
	return c.callTool(ctx, req)
}

func (c *conn) callTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	args := req.Arguments
	if isEmpty(args) {
		args = emptyArgs
	}
	sess := ext.SessionOf(req.Session)
	wantProgress := len(req.ProgressToken) > 0
	var untrack func()
	res, ok, err := c.raw(ctx, "tools/call", func(token string) ([]byte, error) {
		tok := ""
		if wantProgress {
			tok = token
		}
		untrack = c.track(sess, tok)
		if len(req.Params) > 0 && !isEmpty(req.Arguments) {
			// The client's params as they came, with ext-mcp's one edit:
			// the server's tool name, and in _meta (req.Meta, which
			// carries this hop's trace context) its own progress token.
			meta, err := mcpwire.WithProgressToken(req.Meta, tok)
			if err != nil {
				return nil, err
			}
			return mcpwire.EditCall(req.Params, req.Name, meta)
		}
		return mcpwire.CallParams(req.Name, args, req.Meta, tok, req.Task)
	}, sess)
	if untrack != nil {
		defer untrack()
	}
	if !ok {
		return c.callSDK(ctx, req, args, sess)
	}
	if err != nil {
		return c.callError(ctx, req.Name, err)
	}
	// Only the top level's isError is read (in place); the result goes on
	// as the server's bytes.
	isErr, ok := topIsError(res)
	if !ok {
		return ext.ErrorResult("MCP server %q answered tool %q with a malformed result", c.server, req.Name), nil
	}
	return &ext.CallToolResult{Raw: res, IsError: isErr}, nil
}

// topIsError reads the isError member of res, a result object, in place:
// ok is false when res is no valid JSON object or its isError is no
// boolean.
func topIsError(res json.RawMessage) (isErr, ok bool) {
	if !json.Valid(res) {
		return false, false
	}
	ok = true
	if !mcpwire.ObjectFields(res, func(k, v []byte) bool {
		if string(k) == "isError" {
			isErr, ok = string(v) == "true", string(v) == "true" || string(v) == "false"
		}
		return true
	}) {
		// Not a plain object of the scanner's (an escaped key, or no
		// object): encoding/json decides.
		var o struct {
			IsError *bool `json:"isError"`
		}
		if err := json.Unmarshal(res, &o); err != nil {
			return false, false
		}
		return o.IsError != nil && *o.IsError, true
	}
	return isErr, ok
}

// callError maps a broken call: a protocol error is an error result naming
// the server, anything else is the connection's trouble. A call that
// failed for want of the user's sign-in marks ctx's call so (noteSignIn).
func (c *conn) callError(ctx context.Context, tool string, err error) (*ext.CallToolResult, error) {
	var (
		werr *jsonrpc.Error
		big  *tooLargeError
		sie  *catalog.SignInError
	)
	if errors.As(err, &sie) {
		noteSignIn(ctx)
	}
	if errors.As(err, &big) || c.overLimit(err, &big) {
		return ext.ErrorResult("%s", big.Error()), nil
	}
	if gerr := explain(c.server, catalog.IsUserServer(c.server), err); gerr != nil {
		return ext.ErrorResult("%s", gerr.Error()), nil
	}
	if errors.As(err, &werr) {
		return ext.ErrorResult("MCP server %q refused the call of %q: %s (code %d)", c.server, tool,
			c.redactString(werr.Message), werr.Code), nil
	}
	return nil, c.redact(err)
}

// callSDK calls a tool through go-sdk (SSE transport, stateless
// revisions): the result is decoded and marshalled once.
func (c *conn) callSDK(ctx context.Context, req *ext.CallToolRequest, args json.RawMessage, sess ext.Session) (*ext.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: req.Name, Arguments: args}
	if len(req.ProgressToken) > 0 {
		tok := fmt.Sprintf("%sgo-%p", rawPrefix, p)
		defer c.track(sess, tok)()
		p.Meta = mcp.Meta{"progressToken": tok}
	} else {
		defer c.track(sess, "")()
	}
	res, err := c.cs.CallTool(ctx, p)
	if err != nil {
		return c.callError(ctx, req.Name, err)
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
