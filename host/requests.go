package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// CallRequest is a tool call through the host with everything a client
// session brings: its progress token, _meta, task parameters and the
// session itself, through which the extension reports progress and asks
// the client (see [ext.Session]).
type CallRequest = api.CallRequest

// PromptRequest asks for one of a user's prompts.
type PromptRequest = api.PromptRequest

// ResourceRequest asks for one of a user's resources.
type ResourceRequest = api.ResourceRequest

// sessions holds the client sessions the surfaces attached, per user, the
// resource subscriptions they hold, and which extension owns each task a
// user created. Safe for concurrent use.
type sessions struct {
	mu     sync.Mutex
	seq    uint64
	byUser map[string]map[*attached]struct{}
	subs   map[string]map[string]int    // user → uri → subscribers
	tasks  map[string]map[string]string // user → task id → extension
}

type attached struct {
	s    ext.Session
	last uint64 // recency: larger is more recent
}

// maxTasksPerUser bounds the remembered task owners of a user.
const maxTasksPerUser = 1024

func newSessions() *sessions {
	return &sessions{
		byUser: map[string]map[*attached]struct{}{}, subs: map[string]map[string]int{},
		tasks: map[string]map[string]string{},
	}
}

// AttachSession registers an open client session of user: notifications
// for the user ([ext.Host.Notify]) reach it, and [ext.Host.RequestUser]
// may ask it. Call touch whenever the session is used (the most recently
// used session is the one RequestUser asks) and detach when it closes. The
// agent-facing MCP endpoint attaches every session it opens.
func (h *Host) AttachSession(user string, s ext.Session) (touch, detach func()) {
	ss := h.sess
	a := &attached{s: s}
	ss.mu.Lock()
	ss.seq++
	a.last = ss.seq
	if ss.byUser[user] == nil {
		ss.byUser[user] = map[*attached]struct{}{}
	}
	ss.byUser[user][a] = struct{}{}
	ss.mu.Unlock()
	touch = func() {
		ss.mu.Lock()
		ss.seq++
		a.last = ss.seq
		ss.mu.Unlock()
	}
	var once sync.Once
	detach = func() {
		once.Do(func() {
			ss.mu.Lock()
			delete(ss.byUser[user], a)
			if len(ss.byUser[user]) == 0 {
				delete(ss.byUser, user)
			}
			ss.mu.Unlock()
		})
	}
	return touch, detach
}

// subscribed returns the users whose sessions wait for updates of a
// resource: their servers' connections must stay open to send them.
func (ss *sessions) subscribed() map[string]bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make(map[string]bool, len(ss.subs))
	for u, m := range ss.subs {
		if len(m) > 0 {
			out[u] = true
		}
	}
	return out
}

func (ss *sessions) of(user string) []*attached {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*attached, 0, len(ss.byUser[user]))
	for a := range ss.byUser[user] {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].last > out[j].last })
	return out
}

// notifyUser hands a notification to every attached session of user; each
// decides whether it wants it (log level, subscriptions).
func (h *Host) notifyUser(ctx context.Context, user, method string, params json.RawMessage) error {
	switch method {
	case ext.MethodLogMessage, ext.MethodResourceUpdated, ext.MethodElicitationComplete:
	default:
		return fmt.Errorf("extensions may not send %q to clients: %w", method, ext.ErrInvalidArgument)
	}
	for _, a := range h.sess.of(user) {
		_ = a.s.Notify(ctx, method, params) // a session that went away loses it
	}
	return nil
}

// requestUser asks the most recently used session of user that declared
// the capability the method needs.
func (h *Host) requestUser(ctx context.Context, user, method string, params json.RawMessage) (json.RawMessage, error) {
	need := ext.SessionCapability(method)
	if need == "" {
		return nil, fmt.Errorf("extensions may not ask clients %q: %w", method, ext.ErrInvalidArgument)
	}
	for _, a := range h.sess.of(user) {
		if ext.HasCapability(a.s.Capabilities(), need) {
			return a.s.Request(ctx, method, params)
		}
	}
	return nil, fmt.Errorf("user %q has no open client session that declared %q: %w", user, need, ext.ErrUnavailable)
}

// SessionNotify passes a notification a user's client sent (such as
// [ext.MethodRootsChanged]) to every extension with the "sessions"
// capability. Failures are logged, not returned: one extension's trouble
// is not the client's.
func (h *Host) SessionNotify(ctx context.Context, user, method string, params json.RawMessage) error {
	if err := checkUser(user); err != nil {
		return err
	}
	for _, e := range sortedExtensions(h.exts) {
		if !e.descriptor().Has(ext.CapabilitySessions) {
			continue
		}
		err := use(ctx, e, ext.CapabilitySessions, func() string { return "passing on " + method },
			func(sl ext.SessionListener) error { return sl.SessionNotify(ctx, user, method, params) })
		if err != nil {
			e.logger.Warn("session notification failed", "user", user, "method", method, "error", err)
		}
	}
	return nil
}

// CallTool runs a tool for req.User, with the calling client's session.
// See [Host.Call] for the rules; a task-augmented call (req.Task) to an
// extension without the "tasks" capability runs as a plain call.
func (h *Host) CallTool(ctx context.Context, req *CallRequest) (*ext.CallToolResult, error) {
	h.inflight[inflightTool].Add(1)
	defer h.inflight[inflightTool].Add(-1)
	if h.audit == nil {
		return h.callTool(ctx, req, nil)
	}
	var def Tool
	start := time.Now()
	res, err := h.callTool(ctx, req, &def)
	var isErr bool
	var size int
	if res != nil {
		isErr, size = res.IsError, len(res.Raw)+len(res.Content)+len(res.StructuredContent)
	}
	h.auditCall(audit.KindTool, req.User, req.Name, req.Credential, req.SessionID, &def, start, req.Arguments, isErr, size,
		func() []byte { b, _ := res.JSON(); return b }, err)
	return res, err
}

// callTool is CallTool; it sets *def (when not nil) to the tool found.
func (h *Host) callTool(ctx context.Context, req *CallRequest, def *Tool) (*ext.CallToolResult, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	if req.Conversation != "" {
		if err := h.bindConversation(req.User, req.Conversation, req.Scope); err != nil {
			return nil, err
		}
	}
	if err := h.ensureActive(ctx, req.User); err != nil {
		return nil, err
	}
	defer h.busyUser(req.User)()
	if held, ok := h.heldTool(req.User, req.Name); ok && req.Scope.AllowsTool(req.Name) {
		return nil, fmt.Errorf("%s: %w", held.Reason(), ext.ErrPermission)
	}
	tool, ok := h.reg.lookup(req.User, req.Name)
	if !ok || !toolInScope(req.Scope, tool.Tool) {
		return nil, fmt.Errorf("tool %q for user %q: %w", req.Name, req.User, ext.ErrNotFound)
	}
	if def != nil {
		*def = tool
	}
	// The operator's tool policy (policy.go): here, where every call of
	// every surface passes, as Tools is where every list does.
	switch d := h.decide(req.User, tool.Tool); d.Effect {
	case PolicyDeny:
		h.countPolicy("denied")
		return nil, errPolicyDenied(req.User, req.Name)
	case PolicyApprove:
		if err := h.approve(ctx, req, d.Rule); err != nil {
			return nil, err
		}
	}
	release, err := h.limits.Acquire(req.User, req.Name)
	if err != nil {
		h.logger.Debug("call refused by a rate limit", "user", req.User, "tool", req.Name, "error", err)
		return nil, err
	}
	defer release()
	e := h.exts[tool.Extension]
	if e == nil {
		return nil, fmt.Errorf("tool %q: its extension %q is gone: %w", req.Name, tool.Extension, ext.ErrUnavailable)
	}
	args := req.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	task := req.Task
	if len(task) > 0 && !e.descriptor().Has(ext.CapabilityTasks) {
		task = nil
	}
	// The extension's request is the caller's but for what is the host's
	// own (the audit log's names) and its edits.
	creq := *req
	creq.Arguments, creq.Task, creq.Credential, creq.SessionID = args, task, "", ""
	if len(task) != len(req.Task) {
		creq.Params = nil // the params would still ask for the task
	}
	if e.descriptor().Has(ext.CapabilityCallerTools) {
		handle, release := h.callers.add(ctx, e.name, req)
		defer release()
		creq.Caller = handle
	}
	var res *ext.CallToolResult
	err = useFor(ctx, e, req.User, ext.CapabilityTools, func() string { return fmt.Sprintf("calling tool %q", req.Name) },
		func(tc ext.ToolCaller) (err error) {
			res, err = tc.CallTool(ctx, &creq)
			return err
		})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("extension %q returned no result for tool %q: %w", e.name, req.Name, ext.ErrUnavailable)
	}
	if len(task) > 0 {
		h.rememberTask(req.User, e.name, res)
	}
	return res, nil
}

// rememberTask records which extension owns the task a task-augmented call
// created, so tasks/* requests reach it.
func (h *Host) rememberTask(user, extName string, res *ext.CallToolResult) {
	b, err := res.JSON()
	if err != nil {
		return
	}
	var ct struct {
		Task *struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(b, &ct) != nil || ct.Task == nil || ct.Task.TaskID == "" {
		return
	}
	ss := h.sess
	ss.mu.Lock()
	defer ss.mu.Unlock()
	m := ss.tasks[user]
	if m == nil {
		m = map[string]string{}
		ss.tasks[user] = m
	}
	if len(m) >= maxTasksPerUser {
		for k := range m {
			delete(m, k)
			break
		}
	}
	m[ct.Task.TaskID] = extName
}

// Task answers a tasks/* request of user (method is tasks/get,
// tasks/result, tasks/cancel or tasks/list; params raw) by routing it to
// the extension that created the task; tasks/list merges every tasks
// extension's list. sess is the calling client's session (nil: none).
func (h *Host) Task(ctx context.Context, user, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	run := func(e *extension) (out json.RawMessage, err error) {
		err = useFor(ctx, e, user, ext.CapabilityTasks, func() string { return method },
			func(th ext.TaskHandler) (err error) {
				out, err = th.HandleTask(ctx, &ext.TaskRequest{User: user, Method: method, Params: params, Session: sess})
				return err
			})
		return out, err
	}
	switch method {
	case ext.MethodTaskList:
		all := []json.RawMessage{}
		for _, e := range sortedExtensions(h.exts) {
			if !e.descriptor().Has(ext.CapabilityTasks) {
				continue
			}
			out, err := run(e)
			if err != nil {
				e.logger.Warn("listing tasks failed", "user", user, "error", err)
				continue
			}
			var l struct {
				Tasks []json.RawMessage `json:"tasks"`
			}
			if json.Unmarshal(out, &l) == nil {
				all = append(all, l.Tasks...)
			}
		}
		return json.Marshal(map[string]any{"tasks": all})
	case ext.MethodTaskGet, ext.MethodTaskResult, ext.MethodTaskCancel:
		var p struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal(params, &p); err != nil || p.TaskID == "" {
			return nil, fmt.Errorf("%s needs a taskId: %w", method, ext.ErrInvalidArgument)
		}
		h.sess.mu.Lock()
		owner := h.sess.tasks[user][p.TaskID]
		h.sess.mu.Unlock()
		e := h.exts[owner]
		if e == nil {
			return nil, fmt.Errorf("task %q of user %q: %w", p.TaskID, user, ext.ErrNotFound)
		}
		return run(e)
	}
	return nil, fmt.Errorf("unknown task method %q: %w", method, ext.ErrInvalidArgument)
}

// Prompts returns the user's prompts, sorted by name, activating the user
// on first use.
func (h *Host) Prompts(ctx context.Context, user string) ([]Prompt, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	return h.extras.prompts(user), nil
}

// GetPrompt renders one of the user's prompts (an MCP GetPromptResult,
// raw).
func (h *Host) GetPrompt(ctx context.Context, req *PromptRequest) (json.RawMessage, error) {
	h.inflight[inflightPrompt].Add(1)
	defer h.inflight[inflightPrompt].Add(-1)
	start := time.Now()
	out, err := h.getPrompt(ctx, req)
	h.auditCall(audit.KindPrompt, req.User, req.Name, req.Credential, req.SessionID, nil, start, req.Arguments, false, len(out),
		func() []byte { return out }, err)
	return out, err
}

func (h *Host) getPrompt(ctx context.Context, req *PromptRequest) (json.RawMessage, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, req.User); err != nil {
		return nil, err
	}
	e := h.exts[h.extras.promptOwner(req.User, req.Name)]
	if e == nil || !req.Scope.AllowsPrompt(req.Name) {
		return nil, fmt.Errorf("prompt %q for user %q: %w", req.Name, req.User, ext.ErrNotFound)
	}
	var out json.RawMessage
	err := useFor(ctx, e, req.User, ext.CapabilityPrompts, func() string { return fmt.Sprintf("getting prompt %q", req.Name) },
		func(pp ext.PromptProvider) (err error) {
			out, err = pp.GetPrompt(ctx, &ext.GetPromptRequest{User: req.User, Conversation: req.Conversation, Name: req.Name, Arguments: req.Arguments, Session: req.Session})
			return err
		})
	return out, err
}

// Resources returns the user's resources and resource templates, sorted,
// activating the user on first use.
func (h *Host) Resources(ctx context.Context, user string) ([]Resource, []ResourceTemplate, error) {
	if err := checkUser(user); err != nil {
		return nil, nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, nil, err
	}
	rs, ts := h.extras.resources(user)
	return rs, ts, nil
}

// ReadResource reads one of the user's resources (an MCP
// ReadResourceResult, raw): a published URI goes to its extension; any
// other goes, in name order, to the extensions with resource templates
// until one serves it.
func (h *Host) ReadResource(ctx context.Context, req *ResourceRequest) (json.RawMessage, error) {
	h.inflight[inflightResource].Add(1)
	defer h.inflight[inflightResource].Add(-1)
	start := time.Now()
	out, err := h.readResource(ctx, req)
	h.auditCall(audit.KindResource, req.User, req.URI, req.Credential, req.SessionID, nil, start, nil, false, len(out),
		func() []byte { return out }, err)
	return out, err
}

func (h *Host) readResource(ctx context.Context, req *ResourceRequest) (json.RawMessage, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, req.User); err != nil {
		return nil, err
	}
	if req.Scope != nil && !h.extras.resourceInScope(req.User, req.URI, req.Scope) {
		return nil, fmt.Errorf("resource %q for user %q: %w", req.URI, req.User, ext.ErrNotFound)
	}
	var out json.RawMessage
	err := h.onResource(ctx, req.User, req.URI, func(e *extension) error {
		return useFor(ctx, e, req.User, ext.CapabilityResources, func() string { return fmt.Sprintf("reading resource %q", req.URI) },
			func(rp ext.ResourceProvider) (err error) {
				out, err = rp.ReadResource(ctx, &ext.ReadResourceRequest{User: req.User, Conversation: req.Conversation, URI: req.URI, Session: req.Session})
				return err
			})
	})
	return out, err
}

// onResource runs fn on the extension that serves uri for user.
func (h *Host) onResource(ctx context.Context, user, uri string, fn func(*extension) error) error {
	exact, templated := h.extras.resourceOwners(user, uri)
	if e := h.exts[exact]; e != nil {
		return fn(e)
	}
	for _, name := range templated {
		e := h.exts[name]
		if e == nil {
			continue
		}
		err := fn(e)
		if !errors.Is(err, ext.ErrNotFound) {
			return err
		}
	}
	return fmt.Errorf("resource %q for user %q: %w", uri, user, ext.ErrNotFound)
}

// SubscribeResource starts (or, with unsubscribe, stops) one subscriber's
// updates of a resource of user. The extension hears the first subscribe
// and the last unsubscribe of each URI; updates reach the user's sessions
// through their Notify.
func (h *Host) SubscribeResource(ctx context.Context, user, uri string, unsubscribe bool) error {
	if err := checkUser(user); err != nil {
		return err
	}
	ss := h.sess
	ss.mu.Lock()
	m := ss.subs[user]
	if m == nil {
		m = map[string]int{}
		ss.subs[user] = m
	}
	before := m[uri]
	if unsubscribe {
		if before > 0 {
			m[uri]--
		}
		if m[uri] == 0 {
			delete(m, uri)
		}
	} else {
		m[uri]++
	}
	if len(m) == 0 {
		delete(ss.subs, user)
	}
	ss.mu.Unlock()
	if (unsubscribe && before != 1) || (!unsubscribe && before != 0) {
		return nil // not the first subscriber or the last to leave
	}
	err := h.onResource(ctx, user, uri, func(e *extension) error {
		return useFor(ctx, e, user, ext.CapabilityResources, func() string { return fmt.Sprintf("subscribing to %q", uri) },
			func(rp ext.ResourceProvider) error {
				return rp.SubscribeResource(ctx, &ext.SubscribeRequest{User: user, URI: uri, Unsubscribe: unsubscribe})
			})
	})
	if err != nil && !unsubscribe {
		// Undo the count: the subscription did not take.
		ss.mu.Lock()
		if ss.subs[user] != nil {
			ss.subs[user][uri]--
			if ss.subs[user][uri] <= 0 {
				delete(ss.subs[user], uri)
			}
			if len(ss.subs[user]) == 0 {
				delete(ss.subs, user)
			}
		}
		ss.mu.Unlock()
	}
	return err
}

// Complete answers an MCP completion/complete request of user (params raw)
// through the extension that owns the prompt or resource template its
// "ref" names.
func (h *Host) Complete(ctx context.Context, user string, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	var p struct {
		Ref struct {
			Type string `json:"type"`
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"ref"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("completion params: %w", ext.Mark(err, ext.ErrInvalidArgument))
	}
	var owner string
	switch p.Ref.Type {
	case "ref/prompt":
		owner = h.extras.promptOwner(user, p.Ref.Name)
	case "ref/resource":
		owner = h.extras.templateOwner(user, p.Ref.URI)
	default:
		return nil, fmt.Errorf("completion ref type %q: %w", p.Ref.Type, ext.ErrInvalidArgument)
	}
	e := h.exts[owner]
	if e == nil || !e.descriptor().Has(ext.CapabilityCompletions) {
		// Nothing to suggest is an empty answer, not an error.
		return json.RawMessage(`{"completion":{"values":[]}}`), nil
	}
	var out json.RawMessage
	err := useFor(ctx, e, user, ext.CapabilityCompletions, func() string { return "completing" },
		func(c ext.Completer) (err error) {
			out, err = c.Complete(ctx, &ext.CompleteRequest{User: user, Params: params, Session: sess})
			return err
		})
	return out, err
}

// Instructions returns the usage notes the extensions published for user,
// by extension and source.
func (h *Host) Instructions(ctx context.Context, user string) ([]Instruction, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	return h.extras.instructions(user), nil
}

// SubscribeCatalog returns a channel that receives a value (coalesced)
// whenever the user's prompts, resources, resource templates or
// instructions change. Call cancel when done.
func (h *Host) SubscribeCatalog(user string) (events <-chan struct{}, cancel func()) {
	return h.extras.subscribe(user)
}
