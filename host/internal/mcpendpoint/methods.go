package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/yosida95/uritemplate/v3"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/limits"
	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// dispatch answers one request of a session with its raw result; a
// request other than tools/call (whose span callHost makes) and ping of
// a known method gets a span and its duration recorded (telemetry).
func (s *session) dispatch(ctx context.Context, rs *reqSession, m *rpcMsg) (json.RawMessage, error) {
	if s.e.tel == nil || m.Method == "tools/call" || m.Method == "ping" || !knownMethods[m.Method] {
		return s.dispatchMethod(ctx, rs, m)
	}
	ctx, _, span := s.e.tel.StartCall(ctx, telemetry.Call{Method: m.Method, Session: s.id, Protocol: s.version,
		Trace: telemetry.ParamsMeta(m.Params)}, nil)
	out, err := s.dispatchMethod(ctx, rs, m)
	var re *rpcError
	switch {
	case err == nil:
		span.End("")
	case errors.As(err, &re):
		span.End(strconv.Itoa(re.code))
	default:
		span.End(errorType(ctx, err))
	}
	return out, err
}

// knownMethods are the methods whose requests telemetry records by name
// (a bounded label).
var knownMethods = map[string]bool{
	"tools/list": true, "prompts/list": true, "prompts/get": true, "resources/list": true,
	"resources/templates/list": true, "resources/read": true, "resources/subscribe": true,
	"resources/unsubscribe": true, "completion/complete": true, "logging/setLevel": true,
	ext.MethodTaskGet: true, ext.MethodTaskResult: true, ext.MethodTaskCancel: true, ext.MethodTaskList: true,
}

// dispatchMethod is dispatch without telemetry.
func (s *session) dispatchMethod(ctx context.Context, rs *reqSession, m *rpcMsg) (json.RawMessage, error) {
	u := s.u
	switch m.Method {
	case "ping":
		return json.RawMessage("{}"), nil
	case "tools/call":
		return s.callTool(ctx, rs, m.Params)
	case "tools/list":
		return s.listTools(m.Params)
	case "prompts/list":
		c := u.cat.Load()
		return listPage("prompts", c.prompts, m.Params)
	case "prompts/get":
		return s.getPrompt(ctx, rs, m.Params)
	case "resources/list":
		return listPage("resources", u.cat.Load().resources, m.Params)
	case "resources/templates/list":
		return listPage("resourceTemplates", u.cat.Load().templates, m.Params)
	case "resources/read":
		return s.readResource(ctx, rs, m.Params)
	case "resources/subscribe", "resources/unsubscribe":
		return s.subscribe(ctx, m.Params, m.Method == "resources/unsubscribe")
	case "completion/complete":
		if u.scope != nil && !u.cat.Load().completes(m.Params) {
			return nil, errParams("completion: not found")
		}
		params, err := u.cat.Load().hostCompletion(m.Params)
		if err != nil {
			return nil, err
		}
		out, err := s.e.host.Complete(ctx, s.p.User, params, rs)
		return checked(out, err, "completion")
	case "logging/setLevel":
		var p struct {
			Level string `json:"level"`
		}
		if json.Unmarshal(m.Params, &p) != nil || levelIndex(p.Level) < 0 {
			return nil, errParams("logging/setLevel needs a level, one of %s", strings.Join(logLevels, ", "))
		}
		s.mu.Lock()
		s.level = levelIndex(p.Level)
		s.mu.Unlock()
		return json.RawMessage("{}"), nil
	case ext.MethodTaskGet, ext.MethodTaskResult, ext.MethodTaskCancel, ext.MethodTaskList:
		if s.version < mcpwire.V20251125 || u.scope != nil {
			break
		}
		params := m.Params
		if len(params) == 0 {
			params = json.RawMessage("{}")
		}
		out, err := s.e.host.Task(ctx, s.p.User, m.Method, params, rs)
		if errors.Is(err, ext.ErrNotFound) {
			return nil, errParams("unknown task")
		}
		return checked(out, err, "the task request")
	}
	return nil, &rpcError{code: mcpwire.CodeMethodNotFound, msg: fmt.Sprintf("method %q not found", m.Method)}
}

// completes reports whether a completion/complete's ref is one of the
// view's prompts or resource templates (a scoped view completes nothing
// else).
func (c *catalogView) completes(params json.RawMessage) bool {
	var p struct {
		Ref struct {
			Type string `json:"type"`
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"ref"`
	}
	if json.Unmarshal(params, &p) != nil {
		return false
	}
	switch p.Ref.Type {
	case "ref/prompt":
		return c.promptByName[p.Ref.Name] != nil
	case "ref/resource":
		_, ok := slices.BinarySearchFunc(c.templates, p.Ref.URI, func(it listItem, uri string) int { return strings.Compare(it.key, uri) })
		return ok
	}
	return false
}

// reaches reports whether uri is one of the view's resources or matches
// one of its templates (what a scoped session may subscribe to; the host
// checks its reads itself).
func (c *catalogView) reaches(uri string) bool {
	for _, it := range c.resources {
		if it.key == uri {
			return true
		}
	}
	for _, it := range c.templates {
		if t, err := uritemplate.New(it.key); err == nil && t.Regexp().MatchString(uri) {
			return true
		}
	}
	return false
}

// hostCompletion returns completion/complete params with a prompt's MCP
// name mapped back to the host's.
func (c *catalogView) hostCompletion(params json.RawMessage) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, errParams("completion/complete needs params")
	}
	var ref map[string]json.RawMessage
	if json.Unmarshal(p["ref"], &ref) != nil || string(ref["type"]) != `"ref/prompt"` {
		return params, nil
	}
	var name string
	if json.Unmarshal(ref["name"], &name) != nil || c.promptByName[name] == nil {
		return params, nil
	}
	ref["name"], _ = json.Marshal(c.promptByName[name].original)
	p["ref"], _ = json.Marshal(ref)
	return json.Marshal(p)
}

// checked turns a host answer into a result or a JSON-RPC error that
// never carries the host's own message (an MCP server's error answer is
// passed on: it is the server's, and ext-mcp redacts its secrets).
func checked(out json.RawMessage, err error, what string) (json.RawMessage, error) {
	var re *ext.RPCError
	switch {
	case errors.As(err, &re):
		return nil, &rpcError{code: int(re.Code), msg: clip(re.Message, 1000), data: validOrNil(re.Data)}
	case errors.Is(err, ext.ErrInvalidArgument):
		return nil, errParams("invalid params for %s", what)
	case errors.Is(err, ext.ErrNotFound):
		return nil, errParams("%s: not found", what)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, &rpcError{code: mcpwire.CodeInternalError, msg: what + " was cancelled or timed out"}
	case err != nil:
		return nil, &rpcError{code: mcpwire.CodeInternalError, msg: what + " failed: try again later"}
	case !json.Valid(out) || len(bytes.TrimSpace(out)) == 0 || bytes.TrimSpace(out)[0] != '{':
		return nil, &rpcError{code: mcpwire.CodeInternalError, msg: what + " returned a malformed answer"}
	}
	return out, nil
}

func validOrNil(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return nil
	}
	return b
}

// callParams are a tools/call's params, read by ext/mcpwire (the one
// reader of them; the two names below are its, for this package's tests).
type callParams = mcpwire.Call

func parseCallParams(raw json.RawMessage) (callParams, error) { return mcpwire.ParseCall(raw) }

func fastCallParams(raw json.RawMessage) (callParams, bool) { return mcpwire.ScanCall(raw) }

// callTool runs a tool through the user's table: arguments go out and the
// result comes back as raw JSON.
func (s *session) callTool(ctx context.Context, rs *reqSession, raw json.RawMessage) (json.RawMessage, error) {
	p, err := parseCallParams(raw)
	if err != nil {
		return nil, errParams("tools/call params: %v", err)
	}
	s.e.calls.Add(1)
	t := s.u.table.Load()
	ent := t.byName[p.Name]
	if ent == nil {
		if p.Name == searchToolName && t.searchable() {
			return s.searchTools(p.Arguments), nil
		}
		return nil, errParams("%s", s.e.unknownOrHeld(t, s.u, p.Name))
	}
	if refused := ent.refusal(); refused != nil {
		return refused, nil
	}
	// The progress token is read, _meta is not taken apart: the params
	// go on as they came (see ext.CallToolRequest.Params).
	if rs.token, err = mcpwire.ProgressToken(p.Meta); err != nil {
		return nil, errParams("%v", err)
	}
	if string(p.Task) == "null" {
		p.Task = nil
	}
	if s.u.scope != nil && p.Task != nil {
		// A scoped session has no tasks (tasks/list would show the
		// user's others): its calls run as plain calls, the params
		// without their task left behind.
		p.Task, raw = nil, nil
	}
	res, failed, rerr := s.e.callHost(ctx, &api.CallRequest{
		User: s.p.User, Conversation: s.conv, Name: ent.original, Params: raw, Arguments: p.Arguments,
		ProgressToken: rs.token, Meta: p.Meta, Task: p.Task, Session: rs, Scope: s.u.scope,
		Credential: credential(s.p), SessionID: s.id,
	}, ent, s.isClosed, telemetry.Call{Session: s.id, Protocol: s.version})
	if rerr != nil {
		return nil, rerr
	}
	if failed != "" {
		return errorResult(failed), nil
	}
	out, ok := encodeResult(res)
	if !ok {
		return s.e.malformed(s.p.User, ent), nil
	}
	return out, nil
}

func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// refusal is the answer to a call of ent that never reaches the host: a
// codemode tool's error result; nil for the others.
func (ent *entry) refusal() json.RawMessage {
	if ent.exposure == ext.ExposureCodemode {
		return errorResult(fmt.Sprintf("tool %q is only callable from code", ent.name))
	}
	return nil
}

// callHost runs req, a call of ent, through the host (every revision's
// calls do): the host's result, or when the call failed the text of the
// error result to answer with, which words the kind of failure (the
// host's own message may name internals: it is only logged), or the
// JSON-RPC error to answer with when the extension asked for one the
// client acts on (URL elicitation required: its data holds the links for
// the user, see [elicitationRequired]). closed, when set, reports whether
// the caller's session closed meanwhile. tc is what telemetry records
// of the call besides the tool (the session, the stateless request's
// _meta with the trace context).
func (e *Endpoint) callHost(ctx context.Context, req *api.CallRequest, ent *entry, closed func() bool, tc telemetry.Call) (*ext.CallToolResult, string, *rpcError) {
	var span *telemetry.Span
	tc.Tool = ent.original
	meta := req.Meta
	ctx, req.Meta, span = e.tel.StartCall(ctx, tc, req.Meta)
	if len(req.Params) > 0 && !bytes.Equal(meta, req.Meta) {
		// The endpoint's one edit of the client's params: its trace
		// context in _meta.
		if p, err := mcpwire.EditCall(req.Params, "", req.Meta); err == nil {
			req.Params = p
		} else {
			req.Params = nil
		}
	}
	res, err := e.host.CallTool(ctx, req)
	if err == nil && res == nil {
		err = fmt.Errorf("the host returned no result: %w", ext.ErrUnavailable)
	}
	if re := elicitationRequired(err); re != nil {
		span.End("url_elicitation_required")
		e.log.Info("mcp: a tool call needs the user to open a link first", "user", req.User, "tool", ent.original)
		return nil, "", re
	}
	var ar *api.ApprovalRequired
	if errors.As(err, &ar) {
		// The tool policy's refusal is worded for the calling user (the
		// link to approve the call is theirs): passed on, with the tool
		// named as the client knows it.
		span.End("approval_required")
		e.log.Info("mcp: a tool call waits for its user's approval", "user", req.User, "tool", ent.original, "denied", ar.Denied)
		words := *ar
		words.Tool = ent.name
		return nil, words.Error(), nil
	}
	if re := rateLimited(err); re != nil {
		span.End("rate_limited")
		return nil, "", re
	}
	if err != nil {
		span.End(errorType(ctx, err))
		e.log.Warn("mcp: a tool call failed", "user", req.User, "tool", ent.original, "err", err)
		return nil, fmt.Sprintf(callErrorText(ctx, err, closed != nil && closed()), ent.name), nil
	}
	if span != nil && res.IsError {
		span.End("tool_error")
	} else {
		span.End("")
	}
	return res, "", nil
}

// errorType is the error.type of a failed call: the kind of failure,
// bounded, never the host's words.
func errorType(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return "cancelled"
	case errors.Is(err, ext.ErrNotFound):
		return "not_found"
	case errors.Is(err, ext.ErrPermission):
		return "permission_denied"
	case errors.Is(err, ext.ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, ext.ErrUnavailable), errors.Is(err, ext.ErrUnimplemented):
		return "unavailable"
	}
	return "_OTHER"
}

// elicitationRequired is the JSON-RPC error of a call that failed with
// an extension's [ext.CodeURLElicitationRequired] error with data (MCP
// 2025-11-25: the client shows the user the links of its elicitations,
// and the request may be retried afterwards), nil for any other failure.
// The extension words the message and data for the client: ext-mcp only
// asks so of a client that declared URL elicitation.
func elicitationRequired(err error) *rpcError {
	var re *ext.RPCError
	if !errors.As(err, &re) || re.Code != ext.CodeURLElicitationRequired || validOrNil(re.Data) == nil {
		return nil
	}
	return &rpcError{code: int(re.Code), msg: clip(re.Message, 1000), data: re.Data}
}

// rateLimited is the JSON-RPC error of a call a rate limit refused (nil
// for any other failure): code [limits.CodeRateLimited], the host's
// message (it names the limit and when to retry, nothing of another
// user) and data the client acts on: {"retryAfterMs", "limit", "scope",
// "kind"}. An error, not an isError result: the call never reached the
// tool, and the client, not the model, is the one to wait and retry.
func rateLimited(err error) *rpcError {
	var r *limits.Refusal
	if !errors.As(err, &r) {
		return nil
	}
	data, _ := json.Marshal(r.Data())
	return &rpcError{code: limits.CodeRateLimited, msg: r.Error(), data: data}
}

// malformed is the error result of a call whose result cannot be sent.
func (e *Endpoint) malformed(user string, ent *entry) json.RawMessage {
	e.log.Warn("mcp: a tool returned content that is not a JSON array of blocks", "user", user, "tool", ent.original)
	return errorResult(fmt.Sprintf("tool %q returned malformed content", ent.name))
}

// callErrorText is the message (a format for the tool's name) of a failed
// call: the kind of failure, never the host's words.
func callErrorText(ctx context.Context, err error, closed bool) string {
	switch {
	case closed:
		return "the session was closed during the call of tool %q"
	case errors.Is(err, context.DeadlineExceeded):
		return "tool %q timed out"
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return "the call of tool %q was cancelled"
	case errors.Is(err, ext.ErrNotFound):
		return "tool %q is no longer available: list the tools again"
	case errors.Is(err, ext.ErrPermission):
		return "you are not allowed to use tool %q"
	case errors.Is(err, ext.ErrInvalidArgument):
		return "invalid arguments for tool %q: they must be a JSON object that matches its input schema"
	case errors.Is(err, ext.ErrUnavailable), errors.Is(err, ext.ErrUnimplemented):
		return "tool %q is unavailable right now: try again later"
	}
	return "tool %q failed with an internal error"
}

// listTools lists the session's tools: the user's direct tools, the
// deferred ones it found, and search_tools when the user has deferred
// tools; sorted by name.
func (s *session) listTools(params json.RawMessage) (json.RawMessage, error) {
	u := s.u
	u.mu.Lock()
	t := u.table.Load()
	items := t.list
	if len(s.found) > 0 {
		items = t.listWith(s.found)
	}
	u.mu.Unlock()
	return listPage("tools", items, params)
}

// pageSize is the most items a list answer holds.
const pageSize = 1000

// listItem is one element of a list answer: its sort key and its JSON.
type listItem struct {
	key  string
	json []byte
}

// listPage answers a */list request: the page after the params' cursor
// (an opaque encoding of the last key sent), with cacheScope "private"
// (every list is the user's own).
func listPage(field string, items []listItem, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, errParams("list params: %v", err)
		}
	}
	start := 0
	if p.Cursor != "" {
		last, err := base64.RawURLEncoding.DecodeString(p.Cursor)
		if err != nil {
			return nil, errParams("invalid cursor")
		}
		for start < len(items) && items[start].key <= string(last) {
			start++
		}
	}
	end := min(len(items), start+pageSize)
	n := 40 + len(field)
	for _, it := range items[start:end] {
		n += len(it.json) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"`...)
	b = append(b, field...)
	b = append(b, `":[`...)
	for i, it := range items[start:end] {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it.json...)
	}
	b = append(b, ']')
	if end < len(items) {
		b = append(b, `,"nextCursor":"`...)
		b = append(b, base64.RawURLEncoding.EncodeToString([]byte(items[end-1].key))...)
		b = append(b, '"')
	}
	b = append(b, `,"cacheScope":"private"}`...)
	return b, nil
}

// getPrompt renders one of the user's prompts by its MCP name.
func (s *session) getPrompt(ctx context.Context, rs *reqSession, raw json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, errParams("prompts/get params: %v", err)
	}
	pe := s.u.cat.Load().promptByName[p.Name]
	if pe == nil {
		return nil, errParams("unknown prompt %q", p.Name)
	}
	out, err := s.e.host.GetPrompt(ctx, &api.PromptRequest{User: s.p.User, Conversation: s.conv, Name: pe.original, Arguments: p.Arguments, Session: rs, Scope: s.u.scope, Credential: credential(s.p), SessionID: s.id})
	if errors.Is(err, ext.ErrNotFound) {
		return nil, errParams("unknown prompt %q", p.Name)
	}
	return checked(out, err, fmt.Sprintf("prompt %q", p.Name))
}

// resourceNotFound is MCP's error for an unknown resource.
func resourceNotFound(uri string) *rpcError {
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &rpcError{code: mcpwire.CodeResourceNotFound, msg: "Resource not found", data: data}
}

// readResource reads a resource; the host routes it by URI.
func (s *session) readResource(ctx context.Context, rs *reqSession, raw json.RawMessage) (json.RawMessage, error) {
	var p struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.URI == "" {
		return nil, errParams("resources/read needs a uri")
	}
	out, err := s.e.host.ReadResource(ctx, &api.ResourceRequest{User: s.p.User, Conversation: s.conv, URI: p.URI, Session: rs, Scope: s.u.scope, Credential: credential(s.p), SessionID: s.id})
	if errors.Is(err, ext.ErrNotFound) {
		return nil, resourceNotFound(p.URI)
	}
	return checked(out, err, "reading the resource")
}

// subscribe starts or stops this session's updates of a resource. While
// the host handles it the URI is marked subChanging: a second change of it
// is refused, and a close of the session leaves it to this request, so
// that the session and the host's count stay in step.
func (s *session) subscribe(ctx context.Context, raw json.RawMessage, unsubscribe bool) (json.RawMessage, error) {
	var p struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.URI == "" {
		return nil, errParams("the request needs a uri")
	}
	if s.u.scope != nil && !unsubscribe && !s.u.cat.Load().reaches(p.URI) {
		return nil, resourceNotFound(p.URI)
	}
	s.mu.Lock()
	state, had := s.subs[p.URI]
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: "the session is closed"}
	case state == subChanging:
		s.mu.Unlock()
		return nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: fmt.Sprintf("a change of the subscription to %q is under way", p.URI)}
	case had != unsubscribe:
		s.mu.Unlock()
		return json.RawMessage("{}"), nil // nothing changes
	case !unsubscribe && len(s.subs) >= maxSubscriptions:
		s.mu.Unlock()
		return nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: fmt.Sprintf("a session may subscribe to at most %d resources", maxSubscriptions)}
	}
	if s.subs == nil {
		s.subs = map[string]subState{}
	}
	s.subs[p.URI] = subChanging
	s.mu.Unlock()
	err := s.e.host.SubscribeResource(ctx, s.p.User, p.URI, unsubscribe)
	s.mu.Lock()
	closed := s.closed
	if !closed {
		// An unsubscribe is done even when it fails: the host forgets the
		// subscriber first.
		if unsubscribe || err != nil {
			delete(s.subs, p.URI)
		} else {
			s.subs[p.URI] = subOn
		}
	}
	s.mu.Unlock()
	if closed && err == nil && !unsubscribe {
		// Closed meanwhile: close left this one to us; undo it.
		_ = s.e.host.SubscribeResource(context.WithoutCancel(ctx), s.p.User, p.URI, true)
		return nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: "the session is closed"}
	}
	if err != nil {
		if errors.Is(err, ext.ErrNotFound) {
			return nil, resourceNotFound(p.URI)
		}
		return checked(nil, err, "the subscription")
	}
	return json.RawMessage("{}"), nil
}

// initializeResult is the answer to initialize: the revision, what the
// endpoint offers (tasks from 2025-11-25), who it is and the merged
// instructions.
func (e *Endpoint) initializeResult(u *userState, version string) []byte {
	b := make([]byte, 0, 512)
	b = append(b, `{"protocolVersion":"`...)
	b = append(b, version...)
	b = append(b, `","capabilities":{"tools":{"listChanged":true},"prompts":{"listChanged":true},`+
		`"resources":{"subscribe":true,"listChanged":true},"completions":{},"logging":{}`...)
	if version >= mcpwire.V20251125 {
		b = append(b, `,"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`...)
	}
	b = append(b, `},"serverInfo":`...)
	b = append(b, e.info...)
	if in := instructionsFor(u); in != "" {
		q, _ := json.Marshal(in)
		b = append(b, `,"instructions":`...)
		b = append(b, q...)
	}
	return append(b, '}')
}
