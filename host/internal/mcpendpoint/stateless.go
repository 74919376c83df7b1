//lint:file-ignore SA1019 logging is deprecated from MCP 2026-07-28 but still relayed to the clients of that revision that use it (issue 9).
package mcpendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/limits"
	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// The stateless revision (2026-07-28: server/discover, no sessions, every
// request on its own) is served by go-sdk's stateless handler, with one
// go-sdk server per user that mirrors the user's tables: the same tools
// (direct ones listed, deferred ones callable by name and found with
// search_tools), prompts, resources, templates, completions and
// instructions, with list_changed through subscriptions/listen. Each
// request is authenticated like any other and served from its verified
// user's server only. Progress reaches the client on the request's
// stream; the revision has no requests to the client (sampling,
// elicitation and roots fail with ext.ErrUnimplemented) and no sessions
// to log to outside a request.

// statelessLease keeps a user's tables and server after a stateless
// request, for the next one.
const statelessLease = 2 * time.Minute

type userKey struct{}

func (e *Endpoint) newStatelessHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		u, _ := r.Context().Value(userKey{}).(*userState)
		if u == nil {
			return nil
		}
		return e.sdkServerOf(u).srv
	}, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       e.log,
		MaxRequestBodyBytes:          e.maxBody,
		// go-sdk refuses a non-loopback Host on a loopback connection, as
		// ServeHTTP does first; ServeHTTP also allows AllowedHosts, which
		// go-sdk does not know of, so then only ServeHTTP checks.
		DisableLocalhostProtection: len(e.hosts) > 0,
	})
}

// serveStateless serves one request of the stateless revision for p.
func (e *Endpoint) serveStateless(w http.ResponseWriter, r *http.Request, p Principal) {
	u, err := e.acquire(r.Context(), p.User, p.Scope)
	if err != nil {
		if errors.Is(err, errClosed) {
			http.Error(w, "the MCP endpoint is shutting down", http.StatusServiceUnavailable)
			return
		}
		e.log.Error("mcp: loading a user's tools", "user", p.User, "err", err)
		writeRPCError(w, http.StatusServiceUnavailable, nil, mcpwire.CodeInternalError, "could not load your tools: try again later")
		return
	}
	defer e.release(u)
	e.lease(u)
	// CloseToken ends the token's requests in flight too (a long call, a
	// subscriptions/listen stream).
	ctx, cancel := context.WithCancel(context.WithValue(context.WithValue(r.Context(), userKey{}, u), credKey{}, credential(p)))
	defer cancel()
	e.mu.Lock()
	if open := e.statelessOpen[p.User]; e.maxOpen > 0 && open >= e.maxOpen {
		// Logged once until the user is under the cap again: a client
		// hammering at the cap fills no log.
		first := !e.statelessCapped[p.User]
		e.statelessCapped[p.User] = true
		e.mu.Unlock()
		if first {
			e.log.Warn("mcp: a user's open stateless requests are at the cap; more are refused until one ends", "user", p.User, "open", open)
		}
		e.tooManyOpen(w, open)
		return
	}
	e.statelessOpen[p.User]++
	if e.statelessReqs[p.TokenID] == nil {
		e.statelessReqs[p.TokenID] = map[*context.CancelFunc]struct{}{}
	}
	e.statelessReqs[p.TokenID][&cancel] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.statelessReqs[p.TokenID], &cancel)
		if len(e.statelessReqs[p.TokenID]) == 0 {
			delete(e.statelessReqs, p.TokenID)
		}
		if e.statelessOpen[p.User]--; e.statelessOpen[p.User] <= 0 {
			delete(e.statelessOpen, p.User)
		}
		if e.statelessOpen[p.User] < e.maxOpen {
			delete(e.statelessCapped, p.User)
		}
		e.mu.Unlock()
	}()
	r = r.WithContext(ctx)
	if e.serveFast(ctx, w, r, u) {
		return
	}
	e.stateless.ServeHTTP(w, r)
}

// tooManyOpen refuses a stateless request of user, who has open requests
// at the cap already: 429 with Retry-After and the rate-limit error, as a
// concurrency limit refuses a call (the body is not read, so the error
// has no ID).
func (e *Endpoint) tooManyOpen(w http.ResponseWriter, open int) {
	r := &limits.Refusal{Scope: limits.ScopeUser, Kind: limits.KindConcurrency,
		Limit: fmt.Sprintf("%d open requests (calls in flight and subscriptions/listen streams)", open), RetryAfter: limits.ConcurrencyRetry}
	data, _ := json.Marshal(r.Data())
	w.Header().Set("Retry-After", strconv.Itoa(int(max(1, r.RetryAfter.Round(time.Second)/time.Second))))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(mcpwire.ErrorMsg(nil, limits.CodeRateLimited, r.Error(), data))
}

// lease holds u for statelessLease past now (the sweeper lets go).
func (e *Endpoint) lease(u *userState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if u.lease.IsZero() {
		u.refs++
	}
	u.lease = time.Now().Add(statelessLease)
}

// sdkServer is the go-sdk server of a user's stateless requests. Its
// fields are guarded by the user's mu.
type sdkServer struct {
	e            *Endpoint
	u            *userState
	srv          *mcp.Server
	instructions string
	tools        map[string]*entry
	search       bool
	prompts      map[string]string // name → definition
	resources    map[string]string // URI → definition
	templates    map[string]string // URI template → definition
	subs         *statelessSubs
}

// sdkServerOf returns u's server, building it on first use (and again
// when the instructions changed: go-sdk fixes them at creation).
func (e *Endpoint) sdkServerOf(u *userState) *sdkServer {
	u.mu.Lock()
	defer u.mu.Unlock()
	in := instructionsFor(u)
	if u.sdk != nil && u.sdk.instructions == in {
		return u.sdk
	}
	x := &sdkServer{e: e, u: u, instructions: in, tools: map[string]*entry{},
		prompts: map[string]string{}, resources: map[string]string{}, templates: map[string]string{}}
	x.subs = &statelessSubs{x: x, n: map[string]int{}}
	x.srv = mcp.NewServer(e.impl, &mcp.ServerOptions{
		Logger:       e.log,
		Instructions: in,
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Prompts:     &mcp.PromptCapabilities{ListChanged: true},
			Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
			Completions: &mcp.CompletionCapabilities{},
			Logging:     &mcp.LoggingCapabilities{},
		},
		CompletionHandler: x.complete,
		// Resource subscriptions: subscriptions/listen (statelesssubs.go).
		SubscribeHandler:   x.subscribe,
		UnsubscribeHandler: x.unsubscribe,
		// Every list is the user's own.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.CacheScope = "private" },
	})
	x.srv.AddReceivingMiddleware(x.middleware)
	x.syncTools(u.table.Load())
	x.syncCatalog(u.cat.Load())
	u.sdk = x
	return x
}

// syncTools makes the server list what t offers; go-sdk tells listeners.
func (x *sdkServer) syncTools(t *toolTable) {
	want := map[string]*entry{}
	for _, ent := range t.base {
		want[ent.name] = ent
	}
	var remove []string
	for name, ent := range x.tools {
		if want[name] != ent {
			remove = append(remove, name)
			delete(x.tools, name)
		}
	}
	if x.search && !t.searchable() {
		remove = append(remove, searchToolName)
		x.search = false
	}
	if len(remove) > 0 {
		x.srv.RemoveTools(remove...)
	}
	for name, ent := range want {
		if x.tools[name] == ent {
			continue
		}
		if err := addTool(x.srv, ent.tool, x.toolHandler); err == nil {
			x.tools[name] = ent
		}
	}
	if t.searchable() && !x.search {
		if err := addTool(x.srv, searchTool, x.toolHandler); err == nil {
			x.search = true
		}
	}
}

// syncCatalog makes the server offer what c holds.
func (x *sdkServer) syncCatalog(c *catalogView) {
	keep := map[string]bool{}
	for _, pe := range c.src.prompts {
		keep[pe.name] = true
		if x.prompts[pe.name] == string(pe.json) {
			continue
		}
		var p mcp.Prompt
		if json.Unmarshal(pe.json, &p) != nil {
			continue
		}
		x.srv.AddPrompt(&p, x.promptHandler(pe.original))
		x.prompts[pe.name] = string(pe.json)
	}
	for name := range x.prompts {
		if !keep[name] {
			x.srv.RemovePrompts(name)
			delete(x.prompts, name)
		}
	}
	clear(keep)
	for _, r := range c.src.resources {
		keep[r.URI] = true
		def := string(r.Definition)
		if x.resources[r.URI] == def {
			continue
		}
		res := mcp.Resource{URI: r.URI, Name: r.URI}
		_ = json.Unmarshal(r.Definition, &res)
		res.URI = r.URI
		if safely(func() { x.srv.AddResource(&res, x.read) }) {
			x.resources[r.URI] = def
		}
	}
	for uri := range x.resources {
		if !keep[uri] {
			x.srv.RemoveResources(uri)
			delete(x.resources, uri)
		}
	}
	clear(keep)
	for _, t := range c.src.templates {
		keep[t.URITemplate] = true
		def := string(t.Definition)
		if x.templates[t.URITemplate] == def {
			continue
		}
		rt := mcp.ResourceTemplate{URITemplate: t.URITemplate, Name: t.URITemplate}
		_ = json.Unmarshal(t.Definition, &rt)
		rt.URITemplate = t.URITemplate
		if safely(func() { x.srv.AddResourceTemplate(&rt, x.read) }) {
			x.templates[t.URITemplate] = def
		}
	}
	for ut := range x.templates {
		if !keep[ut] {
			x.srv.RemoveResourceTemplates(ut)
			delete(x.templates, ut)
		}
	}
}

// safely runs f, reporting false when it panicked (go-sdk panics on URIs
// it refuses).
func safely(f func()) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	f()
	return true
}

// middleware routes tools/call through the user's table, so that deferred
// tools are callable by name and codemode ones get a clear answer.
func (x *sdkServer) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && r.Params != nil {
			res, err := x.toolHandler(ctx, r)
			if res != nil && supportsMRTR(r) {
				res = complete(res)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// supportsMRTR reports whether req's client speaks multi round-trip
// requests (2026-07-28 on): go-sdk's own test (clientSupportsMultiRoundTrip),
// on which it marks the results of the tools it runs.
func supportsMRTR(req *mcp.CallToolRequest) bool {
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil {
			return mcpwire.Stateless(p.ProtocolVersion)
		}
	}
	return true
}

// completeResult is an empty result marked resultType "complete", as
// go-sdk marks the results of the tools it runs itself; the mark is
// unexported and only go-sdk's decoder sets it.
var completeResult = func() (r mcp.CallToolResult) {
	_ = json.Unmarshal([]byte(`{"content":[],"resultType":"complete"}`), &r)
	return r
}()

// complete is res marked resultType "complete".
func complete(res *mcp.CallToolResult) *mcp.CallToolResult {
	out := completeResult
	out.Meta, out.Content, out.StructuredContent, out.IsError = res.Meta, res.Content, res.StructuredContent, res.IsError
	out.InputRequests, out.RequestState = res.InputRequests, res.RequestState
	return &out
}

func (x *sdkServer) toolHandler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	t := x.u.table.Load()
	ent := t.byName[req.Params.Name]
	if ent == nil {
		if req.Params.Name == searchToolName && t.searchable() {
			found, query, bad := search(t, req.Params.Arguments)
			if bad == nil {
				bad = searchResult(found, query)
			}
			var res mcp.CallToolResult
			if err := json.Unmarshal(bad, &res); err != nil {
				return nil, err
			}
			return &res, nil
		}
		return nil, &jsonrpc.Error{Code: mcpwire.CodeInvalidParams, Message: x.e.unknownOrHeld(t, x.u, req.Params.Name)}
	}
	if refused := ent.refusal(); refused != nil {
		f, _ := statelessFields(&ext.CallToolResult{Raw: refused})
		return toMCP(f), nil
	}
	sess := newSDKSession(ctx, req)
	defer sess.end()
	var tok json.RawMessage
	if t := req.Params.GetProgressToken(); t != nil {
		tok, _ = json.Marshal(t)
	}
	var meta json.RawMessage
	if x.e.tel != nil && req.Params.Meta["traceparent"] != nil {
		meta, _ = json.Marshal(map[string]any{"traceparent": req.Params.Meta["traceparent"], "tracestate": req.Params.Meta["tracestate"]})
	}
	res, rerr := x.e.callStateless(ctx, x.u, ent, req.Params.Arguments, tok, meta, sess)
	if rerr != nil {
		return nil, &jsonrpc.Error{Code: int64(rerr.code), Message: rerr.msg, Data: rerr.data}
	}
	return toMCP(res), nil
}

// callStateless runs a stateless request's call of ent for u (both
// stateless paths do): its result as the revision sends it
// (statelessFields), the error result of a failed call, or the JSON-RPC
// error to answer with instead (see callHost). Stateless calls have no
// conversation: no session stands for one. meta is the request's _meta
// when it may hold trace context (nil: none), which telemetry takes.
func (e *Endpoint) callStateless(ctx context.Context, u *userState, ent *entry, args, token, meta json.RawMessage, sess ext.Session) (*ext.CallToolResult, *rpcError) {
	e.calls.Add(1)
	res, failed, rerr := e.callHost(ctx, &api.CallRequest{
		User: u.user, Name: ent.original, Arguments: args, ProgressToken: token, Session: sess, Scope: u.scope,
		Credential: credentialOf(ctx),
	}, ent, nil, telemetry.Call{Protocol: mcpwire.V20260728, Trace: meta})
	if rerr != nil {
		return nil, rerr
	}
	var out json.RawMessage
	if failed != "" {
		out = errorResult(failed)
	} else if f, ok := statelessFields(res); ok {
		return f, nil
	} else {
		out = e.malformed(u.user, ent)
	}
	f, _ := statelessFields(&ext.CallToolResult{Raw: out})
	return f, nil
}

// hostError is a host failure as go-sdk's JSON-RPC error.
func hostError(out json.RawMessage, err error, what string) error {
	if _, err := checked(out, err, what); err != nil {
		var re *rpcError
		if errors.As(err, &re) {
			return &jsonrpc.Error{Code: int64(re.code), Message: re.msg, Data: re.data}
		}
		return err
	}
	return nil
}

func (x *sdkServer) promptHandler(original string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		args, _ := json.Marshal(req.Params.Arguments)
		sess := newSDKSession(ctx, req)
		defer sess.end()
		out, err := x.e.host.GetPrompt(ctx, &api.PromptRequest{User: x.u.user, Name: original, Arguments: args, Session: sess, Scope: x.u.scope, Credential: credentialOf(ctx)})
		if err := hostError(out, err, fmt.Sprintf("prompt %q", req.Params.Name)); err != nil {
			return nil, err
		}
		var res mcp.GetPromptResult
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, fmt.Errorf("decoding prompt %q: %w", req.Params.Name, err)
		}
		return &res, nil
	}
}

func (x *sdkServer) read(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	sess := newSDKSession(ctx, req)
	defer sess.end()
	out, err := x.e.host.ReadResource(ctx, &api.ResourceRequest{User: x.u.user, URI: req.Params.URI, Session: sess, Scope: x.u.scope, Credential: credentialOf(ctx)})
	if errors.Is(err, ext.ErrNotFound) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err := hostError(out, err, "reading the resource"); err != nil {
		return nil, err
	}
	var res mcp.ReadResourceResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("decoding resource %q: %w", req.Params.URI, err)
	}
	return &res, nil
}

func (x *sdkServer) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	params, err := json.Marshal(req.Params)
	if err != nil {
		return nil, err
	}
	// Prompt names travel as listed: map them back.
	if req.Params.Ref != nil && req.Params.Ref.Type == "ref/prompt" {
		if pe := x.u.cat.Load().promptByName[req.Params.Ref.Name]; pe != nil {
			p := *req.Params
			ref := *p.Ref
			ref.Name = pe.original
			p.Ref = &ref
			params, _ = json.Marshal(&p)
		}
	}
	if x.u.scope != nil && !x.u.cat.Load().completes(params) {
		return nil, hostError(nil, ext.ErrNotFound, "completion")
	}
	sess := newSDKSession(ctx, req)
	defer sess.end()
	out, err := x.e.host.Complete(ctx, x.u.user, params, sess)
	if err := hostError(out, err, "completion"); err != nil {
		return nil, err
	}
	var res mcp.CompleteResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("decoding a completion: %w", err)
	}
	return &res, nil
}

// sdkSession is the [ext.Session] of a stateless request: progress goes
// on the request's stream (go-sdk routes by the handler's context);
// requests to the client do not exist in this revision.
type sdkSession struct {
	ctx   context.Context // the handler's
	ss    *mcp.ServerSession
	token any
	caps  json.RawMessage
	ended atomic.Bool
}

// paramsRequest is what newSDKSession needs of a go-sdk request.
type paramsRequest interface {
	mcp.Request
	ClientCapabilities() *mcp.ClientCapabilities
}

func newSDKSession(ctx context.Context, req paramsRequest) *sdkSession {
	s := &sdkSession{ctx: ctx, caps: json.RawMessage("{}")}
	s.ss, _ = req.GetSession().(*mcp.ServerSession)
	if p, ok := req.GetParams().(interface{ GetProgressToken() any }); ok {
		s.token = p.GetProgressToken()
	}
	if c := req.ClientCapabilities(); c != nil {
		if b, err := json.Marshal(c); err == nil {
			s.caps = b
		}
	}
	return s
}

func (s *sdkSession) end() { s.ended.Store(true) }

// Capabilities implements [ext.Session].
func (s *sdkSession) Capabilities() json.RawMessage { return s.caps }

// Notify implements [ext.Session]: progress and log messages of the
// request. A session of the fast path has no go-sdk session: its request
// asked for no progress and set no log level, so go-sdk would send
// neither.
func (s *sdkSession) Notify(_ context.Context, method string, params json.RawMessage) error {
	if s.ended.Load() {
		return fmt.Errorf("%w: %w", errEnded, ext.ErrUnavailable)
	}
	switch method {
	case ext.MethodProgress:
		if s.token == nil {
			return nil
		}
		var p mcp.ProgressNotificationParams
		if err := json.Unmarshal(params, &p); err != nil {
			return fmt.Errorf("progress params: %w", ext.Mark(err, ext.ErrInvalidArgument))
		}
		p.ProgressToken = s.token
		return s.ss.NotifyProgress(s.ctx, &p)
	case ext.MethodLogMessage:
		var p mcp.LoggingMessageParams
		if err := json.Unmarshal(params, &p); err != nil {
			return fmt.Errorf("log params: %w", ext.Mark(err, ext.ErrInvalidArgument))
		}
		if s.ss == nil {
			return nil
		}
		return s.ss.Log(s.ctx, &p)
	}
	return fmt.Errorf("notification %q is not sent in a request: %w", method, ext.ErrInvalidArgument)
}

// Request implements [ext.Session]: the stateless revision asks clients
// nothing.
func (s *sdkSession) Request(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
	return nil, fmt.Errorf("protocol revision %s has no %s requests to the client: %w", mcpwire.V20260728, method, ext.ErrUnimplemented)
}

var _ ext.Session = (*sdkSession)(nil)

// credKey carries a stateless request's credential (for the audit log).
type credKey struct{}

// credential names p's credential for the audit log: its token's (or
// OAuth grant's) ID, never the token.
func credential(p Principal) string {
	if p.TokenID == "" {
		return ""
	}
	return "token:" + p.TokenID
}

func credentialOf(ctx context.Context) string {
	c, _ := ctx.Value(credKey{}).(string)
	return c
}
