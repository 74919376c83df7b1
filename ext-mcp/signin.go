package extmcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/ext/netguard"
)

// Sign-ins: the "auth" capability. BeginAuth probes the server for its
// 401, then runs go-sdk's AuthorizationCodeHandler, which does the OAuth
// work — protected resource metadata from the challenge, authorization
// server metadata, the client (the host's client ID metadata document,
// else a configured or earlier registered client, else dynamic
// registration), PKCE S256, the resource indicator, step-up scopes — up to
// the point where a person must open the authorization URL. The handler
// then waits, on a goroutine the extension owns, for CompleteAuth to bring
// the redirect; it checks the state and the issuer (RFC 9207), exchanges
// the code, and the grant is stored in the secrets of the user (or of the
// operator, for a shared server).

// Limits of the sign-ins under way.
const (
	// flowLifetime is how long a sign-in waits for its redirect.
	flowLifetime = 10 * time.Minute
	// maxFlowsPerOwner bounds the sign-ins one user has waiting.
	maxFlowsPerOwner = 8
	// maxBody bounds what a metadata or probe response is read for.
	maxOAuthBody = 1 << 20
)

// flow is one sign-in under way.
type flow struct {
	owner, server string
	state         string // set once the URL is out; guarded by oauthState.mu
	expires       time.Time
	answers       chan redirectAnswer // the redirect, from CompleteAuth (buffered)
	done          chan struct{}
	err           error       // why it failed; read after done
	rec           *asRecorder // the authorization server's issuer, once known
	cancel        context.CancelFunc
}

// redirectAnswer is the redirect CompleteAuth hands the waiting handler.
type redirectAnswer struct {
	res *auth.AuthorizationResult
	err error
}

// BeginAuth implements [ext.Authorizer]: it starts signing req.User (or
// the operator, for a shared server) in to server req.Name.
func (x *Extension) BeginAuth(ctx context.Context, req *ext.BeginAuthRequest) (*ext.BeginAuthResult, error) {
	if req == nil || req.User == "" {
		return nil, fmt.Errorf("signing in: caller not identified: %w", ext.ErrPermission)
	}
	if _, err := url.Parse(req.RedirectURL); err != nil || req.RedirectURL == "" {
		return nil, fmt.Errorf("signing in: the host gave no redirect URL: %w", ext.ErrInvalidArgument)
	}
	// The slot is taken first, so that sign-ins started at once cannot
	// all pass the count; the flow gives it back when it ends.
	release, err := x.admitFlow(req.User)
	if err != nil {
		return nil, err
	}
	handed := false
	defer func() {
		if !handed {
			release()
		}
	}()
	h, us, err := x.signInTarget(ctx, req.User, req.Name)
	if err != nil {
		return nil, err
	}
	probeReq, probeResp, err := x.probe(ctx, us)
	if err != nil {
		return nil, err
	}
	f, urls, err := x.startFlow(ctx, h, req, us, probeReq, probeResp, release)
	if err != nil {
		return nil, err
	}
	handed = true
	select {
	case u := <-urls:
		authURL, err := netguard.CheckURL(u, false)
		var state string
		if err == nil {
			state = authURL.Query().Get("state")
		}
		if err != nil || state == "" {
			f.cancel()
			<-f.done
			if err == nil {
				err = errors.New("it has no state")
			}
			return nil, fmt.Errorf("signing in to MCP server %q: the authorization server's URL is refused (%v): %w", req.Name, err, ext.ErrInvalidArgument)
		}
		x.oauth.mu.Lock()
		f.state = state // read by dropFlow, under the same lock
		if x.oauth.flows == nil {
			x.oauth.flows = map[string]*flow{}
		}
		x.oauth.flows[state] = f
		x.oauth.mu.Unlock()
		return &ext.BeginAuthResult{URL: authURL.String(), State: state, Expires: f.expires}, nil
	case <-f.done:
		class := ext.ErrUnavailable
		if errors.Is(f.err, errNoPKCE) || errors.Is(f.err, errNoMetadata) {
			class = ext.ErrInvalidArgument // the server's setup, not its reach
		}
		return nil, fmt.Errorf("signing in to MCP server %q: %s: %w", req.Name, signInFailure(f.err), class)
	case <-ctx.Done():
		f.cancel()
		<-f.done
		return nil, ctx.Err()
	}
}

// admitFlow counts one more sign-in of owner under way (from its start
// until its flow ends), refused beyond maxFlowsPerOwner; release counts
// it out (once, however often it is called).
func (x *Extension) admitFlow(owner string) (release func(), err error) {
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := o.underway[owner]; n >= maxFlowsPerOwner {
		return nil, fmt.Errorf("%d sign-ins are already under way; finish one or wait %v: %w", n, flowLifetime, ext.ErrUnavailable)
	}
	if o.underway == nil {
		o.underway = map[string]int{}
	}
	o.underway[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.underway[owner]--; o.underway[owner] <= 0 {
				delete(o.underway, owner)
			}
		})
	}, nil
}

// signInTarget finds the server user may sign in to: a remote server in
// the user's plan that uses the user's own credentials (or, for the
// operator, a shared remote server), without a token stored for it.
func (x *Extension) signInTarget(ctx context.Context, user, name string) (ext.Host, *userSpec, error) {
	h, planner, _, err := x.state()
	if err != nil {
		return nil, nil, err
	}
	var d *catalog.ServerDecl
	if user == OperatorUser {
		x.mu.Lock()
		cfg := x.cfg
		x.mu.Unlock()
		cfg.each(func(n string, s Server) {
			if n == name && s.Credentials == catalog.CredentialsShared {
				dd := decl(n, s, false)
				d = &dd
			}
		})
		if d == nil {
			return nil, nil, fmt.Errorf("the operator has no shared MCP server %q to sign in to (the operator signs in only to servers with credentials shared): %w", name, ext.ErrNotFound)
		}
	} else {
		plan, err := planner.Plan(ctx, user)
		if err != nil {
			return nil, nil, err
		}
		for i := range plan.Servers {
			if plan.Servers[i].Name == name {
				d = &plan.Servers[i]
			}
		}
		if d == nil {
			return nil, nil, fmt.Errorf("you have no MCP server %q switched on: %w", name, ext.ErrNotFound)
		}
		if d.Credentials == catalog.CredentialsShared {
			return nil, nil, fmt.Errorf("MCP server %q is shared: the operator signs in to it (agenthost auth login --operator %s): %w", name, name, ext.ErrInvalidArgument)
		}
	}
	owner := user
	us, err := x.ownerSpec(ctx, h, owner, *d)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case us.server.URL == "":
		return nil, nil, fmt.Errorf("MCP server %q is a local program: it takes a token (%s), not a sign-in: %w", name, TokenSecret(name), ext.ErrInvalidArgument)
	case us.server.Type == "sse":
		return nil, nil, fmt.Errorf("MCP server %q uses the legacy SSE transport, which cannot sign in: %w", name, ext.ErrInvalidArgument)
	case us.server.clientCredentials():
		return nil, nil, fmt.Errorf("MCP server %q gets its token with the operator's client credentials (oauth.grant client_credentials): nobody signs in to it: %w",
			name, ext.ErrInvalidArgument)
	case us.token != "":
		return nil, nil, fmt.Errorf("a token is stored for MCP server %q (%s) and is used instead of a sign-in: delete it first: %w", name, TokenSecret(name), ext.ErrInvalidArgument)
	}
	return h, us, nil
}

// probe finds the challenge that starts the sign-in where the server
// gives it: it sends an unauthenticated initialize and, when that is let
// through (some servers ask for a token only from tools/list on), goes on
// in the session it opened as a connection would, with
// notifications/initialized and tools/list, and ends the session. It
// returns the refused request and its 401 (or 403) response. It sends
// nothing that could act (no tool call): a server that asks only from a
// tool call on is signed in to from the refusal a connection of the
// owner met last (noteChallenge).
func (x *Extension) probe(ctx context.Context, us *userSpec) (*http.Request, *http.Response, error) {
	name := us.name
	hc := x.oauthClient(us.own, us.server.URL)
	send := func(method, sid, version, body string) (*http.Request, *http.Response, error) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, us.server.URL, rd)
		if err != nil {
			return nil, nil, fmt.Errorf("MCP server %q: the url does not parse: %w", name, ext.ErrInvalidArgument)
		}
		for k, v := range us.server.Headers {
			if !isAuthorization(k) {
				req.Header.Set(k, v)
			}
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", version)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil, fmt.Errorf("reaching MCP server %q: %v: %w", name, err, ext.ErrUnavailable)
		}
		return req, resp, nil
	}
	challenged := func(resp *http.Response) bool {
		return resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden
	}
	version := cmp.Or(us.server.ProtocolVersion, DefaultProtocolVersion)
	if version == ProtocolLatest {
		version = DefaultProtocolVersion
	}
	var probe probeInit
	probe.ProtocolVersion, probe.ClientInfo.Name, probe.ClientInfo.Version = version, "agenthost-ext-mcp", Version
	initParams, _ := json.Marshal(probe) // strings always encode
	req, resp, err := send(http.MethodPost, "", "", string(mcpwire.AppendRequestRawID(nil, json.RawMessage("1"), mcpwire.MethodInitialize, initParams)))
	if err != nil {
		return nil, nil, err
	}
	if challenged(resp) {
		return req, resp, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxOAuthBody))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, nil, fmt.Errorf("MCP server %q answered %s instead of asking for a sign-in: %w", name, resp.Status, ext.ErrUnavailable)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid != "" {
		// The probe's session ends with the probe, whatever it found.
		defer func() {
			if _, r, err := send(http.MethodDelete, sid, version, ""); err == nil {
				_ = r.Body.Close()
			}
		}()
	}
	version = cmp.Or(negotiatedVersion(b), version)
	for _, step := range []struct{ method, body string }{
		{mcpwire.MethodInitialized, string(mcpwire.NotificationMsg(mcpwire.MethodInitialized, nil))},
		{mcpwire.MethodToolsList, string(mcpwire.AppendRequestRawID(nil, json.RawMessage("2"), mcpwire.MethodToolsList, nil))},
	} {
		req, resp, err := send(http.MethodPost, sid, version, step.body)
		if err != nil {
			return nil, nil, err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxOAuthBody))
		_ = resp.Body.Close()
		if challenged(resp) {
			resp.Body = io.NopCloser(bytes.NewReader(b)) // read before the session ends
			return req, resp, nil
		}
		if resp.StatusCode/100 != 2 {
			return nil, nil, fmt.Errorf("MCP server %q answered %s to %s instead of asking for a sign-in: %w", name, resp.Status, step.method, ext.ErrUnavailable)
		}
	}
	if c, ok := x.lastChallenge(us.owner, name); ok {
		// It asks further on (a tool call), which the probe does not
		// make: the refusal a connection of the owner met says where.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, us.server.URL, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("MCP server %q: the url does not parse: %w", name, ext.ErrInvalidArgument)
		}
		return req, &http.Response{StatusCode: c.status, Status: fmt.Sprintf("%d %s", c.status, http.StatusText(c.status)),
			Header: http.Header{"Www-Authenticate": slices.Clone(c.header)}, Body: http.NoBody, Request: req}, nil
	}
	return nil, nil, fmt.Errorf("MCP server %q does not ask for a sign-in (it answered initialize and tools/list without one): %w", name, ext.ErrInvalidArgument)
}

// negotiatedVersion returns the protocol version of an initialize answer,
// sent as JSON or as an event stream; "" when it has none.
func negotiatedVersion(body []byte) string {
	var msg struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if json.Unmarshal(body, &msg) == nil {
		return msg.Result.ProtocolVersion
	}
	for line := range strings.Lines(string(body)) {
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data:"); ok && json.Unmarshal([]byte(data), &msg) == nil {
			return msg.Result.ProtocolVersion
		}
	}
	return ""
}

// startFlow runs go-sdk's handler on a goroutine of the extension. It
// returns the flow and the channel on which the authorization URL
// arrives; the flow's done closes when the handler returns.
func (x *Extension) startFlow(ctx context.Context, h ext.Host, req *ext.BeginAuthRequest, us *userSpec,
	probeReq *http.Request, probeResp *http.Response, release func()) (*flow, <-chan string, error) {
	owner, name, s := req.User, req.Name, us.server
	hc := x.oauthClient(us.own, s.URL)
	var configured []string
	allowDefault := false
	if s.OAuth != nil {
		configured, allowDefault = s.OAuth.Scopes, s.OAuth.AllowDefaultEndpoints && !us.own
	}
	rec := &asRecorder{base: hc.Transport, allowDefault: allowDefault}
	client := &http.Client{Transport: rec, Timeout: hc.Timeout, CheckRedirect: hc.CheckRedirect}
	old := us.grant
	pre := (*oauthex.ClientCredentials)(nil)
	fromConfig := s.OAuth != nil && s.OAuth.ClientID != ""
	switch {
	case fromConfig:
		pre = &oauthex.ClientCredentials{ClientID: s.OAuth.ClientID}
		if ref := s.OAuth.ClientSecret; ref != nil {
			v, err := h.UserStore(OperatorUser).Secrets().Get(ctx, ref.Secret)
			if err != nil {
				_ = probeResp.Body.Close()
				return nil, nil, fmt.Errorf("MCP server %q: the operator secret %q (oauth.clientSecret) is not set: %w", name, ref.Secret, ext.ErrInvalidArgument)
			}
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: v}
		}
	case old != nil && old.Registered && old.RedirectURI == req.RedirectURL && old.Issuer != "":
		// The client registered last time, offered to that issuer only.
		pre = &oauthex.ClientCredentials{ClientID: old.ClientID, Issuer: old.Issuer}
		if old.ClientSecret != "" {
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: old.ClientSecret}
		}
	}
	var previous []string
	if old != nil {
		previous = old.Scopes
	}
	stepUp := x.stepUpScopes(owner, name)
	urls := make(chan string, 1)
	fctx, cancel := context.WithTimeout(x.life, flowLifetime)
	f := &flow{owner: owner, server: name, expires: time.Now().Add(flowLifetime), answers: make(chan redirectAnswer, 1),
		done: make(chan struct{}), rec: rec, cancel: cancel}
	var got struct {
		cfg *oauth2.Config
		tok *oauth2.Token
	}
	newHandler := func(pre *oauthex.ClientCredentials) (*auth.AuthorizationCodeHandler, error) {
		c := &auth.AuthorizationCodeHandlerConfig{
			PreregisteredClient: pre,
			DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
				ClientName: "agenthost", RedirectURIs: []string{req.RedirectURL}, TokenEndpointAuthMethod: "none",
				GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
			}},
			RedirectURL:         req.RedirectURL,
			RequestRefreshToken: true,
			Client:              client,
			ScopeFilter: func(discovered []string) []string {
				out := discovered
				if len(configured) > 0 {
					out = slices.Clone(configured)
				}
				for _, sc := range append(previous, stepUp...) {
					if !slices.Contains(out, sc) {
						out = append(out, sc)
					}
				}
				return out
			},
			AuthorizationCodeFetcher: func(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
				switch {
				case rec.pkceS256():
				case rec.issuerSeen() != "":
					// go-sdk goes on with any method listed; MCP
					// authorization says refuse: nobody is sent to sign in.
					return nil, errNoPKCE
				case !allowDefault:
					// No metadata: go-sdk goes on with the 2025-03-26
					// default endpoints, which only the operator may allow.
					return nil, errNoMetadata
				}
				select {
				case urls <- a.URL:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				select {
				case ans := <-f.answers:
					return ans.res, ans.err
				case <-ctx.Done():
					return nil, errFlowExpired
				}
			},
			NewTokenSource: func(_ context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
				got.cfg, got.tok = cfg, tok
				return oauth2.StaticTokenSource(tok), nil
			},
		}
		if req.ClientMetadataURL != "" {
			c.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: req.ClientMetadataURL}
		}
		return auth.NewAuthorizationCodeHandler(c)
	}
	handler, err := newHandler(pre)
	if err != nil {
		cancel()
		_ = probeResp.Body.Close()
		return nil, nil, fmt.Errorf("MCP server %q: setting up the sign-in: %v: %w", name, err, ext.ErrInvalidArgument)
	}
	started := x.spawn(func(context.Context) {
		defer close(f.done)
		defer cancel()
		defer release()
		defer x.dropFlow(f)
		err := handler.Authorize(fctx, probeReq, probeResp)
		if err != nil && pre != nil && !fromConfig && strings.Contains(err.Error(), "does not match pre-registered credentials issuer") {
			// The server moved to another authorization server: register
			// anew there, never reusing the old registration. The probe's
			// response was consumed: ask again.
			x.log.Info("extmcp: the server's authorization server changed; registering again", "user", owner, "server", name)
			var preq *http.Request
			var presp *http.Response
			if preq, presp, err = x.probe(fctx, us); err == nil {
				var h2 *auth.AuthorizationCodeHandler
				if h2, err = newHandler(nil); err == nil {
					pre = nil
					err = h2.Authorize(fctx, preq, presp)
				}
			}
		}
		if err == nil && got.tok == nil {
			err = errors.New("the authorization server issued no token")
		}
		if err == nil {
			// Without metadata (allowDefaultEndpoints), the issuer is
			// the root the default endpoints hang off, as go-sdk takes it.
			issuer := cmp.Or(rec.issuerSeen(), strings.TrimSuffix(got.cfg.Endpoint.TokenURL, "/token"))
			g := &grant{V: 1, ID: newGrantID(), Issuer: issuer, ClientID: got.cfg.ClientID,
				Resource: s.URL, TokenURL: got.cfg.Endpoint.TokenURL, AuthStyle: got.cfg.Endpoint.AuthStyle,
				Scopes: got.cfg.Scopes, RedirectURI: req.RedirectURL}
			switch {
			case fromConfig:
				if s.OAuth.ClientSecret != nil {
					g.SecretRef = s.OAuth.ClientSecret.Secret
				}
			case got.cfg.ClientID != req.ClientMetadataURL || req.ClientMetadataURL == "":
				// Registered on the fly (now, or last time): keep it for
				// the next sign-in to the same issuer.
				g.Registered, g.ClientSecret = true, got.cfg.ClientSecret
			}
			if g.ClientSecret == "" && g.SecretRef == "" {
				// A public client sends its ID in the body (OAuth 2.1
				// §2.4.1); never guess the style again on each refresh.
				g.AuthStyle = oauth2.AuthStyleInParams
			}
			g = g.withToken(got.tok, time.Now())
			sctx, scancel := context.WithTimeout(x.life, 10*time.Second)
			mu := x.oauth.storeLock(owner, name) // no refresh's check-then-write in between
			mu.Lock()
			err = x.storeGrant(sctx, h, owner, name, g)
			mu.Unlock()
			scancel()
			x.oauth.mu.Lock()
			delete(x.oauth.stepUp, [2]string{owner, name}) // asked for, and granted or not
			delete(x.oauth.challenges, [2]string{owner, name})
			x.oauth.mu.Unlock()
		}
		f.err = err
	})
	if !started {
		// Shut down meanwhile: no flow, and nothing waits for one.
		cancel()
		_ = probeResp.Body.Close()
		return nil, nil, fmt.Errorf("extmcp: shut down: %w", ext.ErrUnavailable)
	}
	return f, urls, nil
}

// errFlowExpired ends a sign-in nobody finished.
var errFlowExpired = errors.New("the sign-in expired before the browser came back")

// errNoPKCE ends a sign-in whose authorization server does not say it
// supports PKCE with S256 (its RFC 8414 metadata).
var errNoPKCE = errors.New("its authorization server publishes no metadata (RFC 8414) listing PKCE with S256 " +
	"(code_challenge_methods_supported), which a sign-in requires")

// errNoMetadata ends a sign-in whose authorization server publishes no
// metadata, where the operator did not allow the 2025-03-26 default
// endpoints.
var errNoMetadata = errors.New("its authorization server publishes no metadata (RFC 8414), so its issuer and its support for PKCE " +
	"with S256 cannot be checked; the operator may allow a server on the MCP 2025-03-26 rules (endpoints at its root) with " +
	`"oauth": {"allowDefaultEndpoints": true}`)

// dropFlow forgets f.
func (x *Extension) dropFlow(f *flow) {
	x.oauth.mu.Lock()
	defer x.oauth.mu.Unlock()
	if f.state != "" && x.oauth.flows[f.state] == f {
		delete(x.oauth.flows, f.state)
	}
}

// CompleteAuth implements [ext.Authorizer]: it hands the redirect to the
// sign-in that waits for it, once, and reports how it ended.
func (x *Extension) CompleteAuth(ctx context.Context, req *ext.CompleteAuthRequest) (*ext.CompleteAuthResult, error) {
	if req == nil {
		return nil, fmt.Errorf("extmcp: nil request: %w", ext.ErrInvalidArgument)
	}
	x.oauth.mu.Lock()
	f := x.oauth.flows[req.State]
	if f != nil && f.owner == req.User && f.server == req.Name {
		delete(x.oauth.flows, req.State) // used once
	}
	x.oauth.mu.Unlock()
	switch {
	case f == nil || req.State == "":
		return nil, fmt.Errorf("no sign-in is waiting for this redirect: it was already used, it expired, or it was started elsewhere; start it again: %w", ext.ErrInvalidArgument)
	case f.owner != req.User || f.server != req.Name:
		return nil, fmt.Errorf("this redirect belongs to another sign-in: %w", ext.ErrPermission)
	}
	q, err := url.ParseQuery(req.Query)
	if err != nil {
		q = url.Values{}
	}
	iss := q.Get("iss")
	var ans redirectAnswer
	switch {
	case q.Get("error") != "":
		if want := f.rec.issuerSeen(); iss != "" && want != "" && iss != want {
			// RFC 9207: not from the server asked; its words are not shown.
			ans.err = errors.New("the redirect came from another authorization server than the one asked, and was ignored")
		} else {
			msg := "the authorization server refused: " + clip(q.Get("error"), 60)
			if d := strings.TrimSpace(q.Get("error_description")); d != "" {
				msg += " (" + clip(d, 200) + ")"
			}
			ans.err = errors.New(msg)
		}
	case q.Get("code") == "":
		ans.err = errors.New("the authorization server's redirect has no code")
	default:
		ans.res = &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: iss}
	}
	f.answers <- ans
	select {
	case <-f.done:
	case <-ctx.Done():
		// The flow goes on (it is the extension's); the grant is stored
		// if it succeeds.
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, fmt.Errorf("signing in to MCP server %q failed: %s", f.server, signInFailure(redactCode(f.err, q.Get("code"))))
	}
	// The server is connected again with the new grant.
	h, _, e, err := x.state()
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if f.owner == OperatorUser {
			err = e.ReconcileAll(rctx)
		} else {
			err = e.Refresh(rctx, f.owner)
		}
		cancel()
		if err != nil {
			x.log.Warn("extmcp: refreshing after a sign-in failed", "user", f.owner, "server", f.server, "error", err)
		}
	}
	x.log.Info("extmcp: signed in", "user", f.owner, "server", f.server)
	if h != nil && f.owner != OperatorUser {
		x.offerDone(ctx, h, f.owner, f.server)
	}
	return &ext.CompleteAuthResult{Message: fmt.Sprintf("Connected to %s.", f.server)}, nil
}

// redactCode removes the authorization code from an error's text.
func redactCode(err error, code string) error {
	if code == "" || !strings.Contains(err.Error(), code) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), code, "[code]"))
}

// signInFailure says in words why a sign-in failed.
func signInFailure(err error) string {
	var re *oauth2.RetrieveError
	switch {
	case err == nil:
		return "it stopped"
	case errors.As(err, &re):
		return "the code was refused: " + refreshErrorText(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errFlowExpired.Error()
	case errors.Is(err, errNoMetadata):
		return errNoMetadata.Error()
	case errors.Is(err, errNoPKCE):
		return errNoPKCE.Error()
	}
	return clip(err.Error(), 300)
}

// asRecorder watches the handler's requests for the authorization
// server's metadata and keeps its issuer and whether it offers PKCE with
// S256: go-sdk does not hand them out, the grant is bound to the issuer,
// and a sign-in goes on only with S256.
type asRecorder struct {
	base http.RoundTripper
	// allowDefault lets requests go on to an authorization server that
	// publishes no metadata (oauth.allowDefaultEndpoints).
	allowDefault bool

	mu     sync.Mutex
	issuer string
	s256   bool
}

func (r *asRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost {
		// A registration or a token request: discovery is over, and
		// nothing is sent to an authorization server a sign-in may not
		// use.
		r.mu.Lock()
		issuer, s256 := r.issuer, r.s256
		r.mu.Unlock()
		switch {
		case issuer != "" && !s256:
			return nil, errNoPKCE
		case issuer == "" && !r.allowDefault:
			return nil, errNoMetadata
		}
	}
	resp, err := r.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK ||
		!(strings.Contains(req.URL.Path, "/.well-known/oauth-authorization-server") || strings.Contains(req.URL.Path, "/.well-known/openid-configuration")) {
		return resp, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOAuthBody+1))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var meta struct {
		Issuer                string   `json:"issuer"`
		AuthorizationEndpoint string   `json:"authorization_endpoint"`
		TokenEndpoint         string   `json:"token_endpoint"`
		CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
	}
	if json.Unmarshal(b, &meta) == nil && meta.Issuer != "" && meta.AuthorizationEndpoint != "" && meta.TokenEndpoint != "" {
		r.mu.Lock()
		r.issuer, r.s256 = meta.Issuer, slices.Contains(meta.CodeChallengeMethods, "S256")
		r.mu.Unlock()
	}
	return resp, nil
}

func (r *asRecorder) issuerSeen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.issuer
}

// pkceS256 reports whether the authorization server's metadata was seen
// and lists S256.
func (r *asRecorder) pkceS256() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.issuer != "" && r.s256
}

// probeInit is the initialize params of a sign-in probe.
type probeInit struct {
	ProtocolVersion string   `json:"protocolVersion"`
	Capabilities    struct{} `json:"capabilities"`
	ClientInfo      struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"clientInfo"`
}
