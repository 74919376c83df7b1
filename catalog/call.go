package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// disabledResult is the result of a call to a retired server.
func disabledResult(server string) *ext.CallToolResult {
	return ext.ErrorResult("MCP server %q is disabled", server)
}

// Call calls a tool by its full name (req.Name, "server/tool") for
// req.User. The name is split at its first "/": server names never contain
// one, tool names may. req.Session (nil: none) carries the calling client's
// progress, log messages and requests.
//
// An empty user is refused before anything else. An unknown tool is
// [ext.ErrNotFound]. A retired server answers the error result
// `MCP server "S" is disabled`; one that waits for a sign-in
// `MCP server "S" needs sign-in: <how>`; a quarantined one an error result with its
// reason. The server's timeout is an idle limit: a call that reports no
// progress for that long ends with an error result naming the server and
// the limit, and each progress notification starts the clock again;
// MaxDuration, when set, bounds the call whatever it reports. An error
// return means the call itself broke (ctx ended, the engine is closed).
//
// A task-augmented call (req.Task) answers with the server's
// CreateTaskResult, its task ID namespaced as "server/id" so tasks/*
// requests find their server ([Engine.Task]).
func (e *Engine) Call(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	fullName := req.Name
	server, tool, ok := strings.Cut(fullName, "/")
	if req.User == "" {
		return nil, fmt.Errorf("calling %q: caller not identified: %w", fullName, ext.ErrPermission)
	}
	if !ok || server == "" || tool == "" {
		return nil, fmt.Errorf("tool %q: %w", fullName, ext.ErrNotFound)
	}
	c, refused, err := e.acquire(req.User, server, func(c *conn) bool { _, ok := c.index[tool]; return ok })
	if refused != nil || err != nil {
		if errors.Is(err, ext.ErrNotFound) {
			err = fmt.Errorf("tool %q: %w", fullName, ext.ErrNotFound)
		}
		return refused, err
	}
	defer e.release(c)
	idle, hard := c.limits(e)

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(idle, func() { cancel(limitError{"no answer or progress within", idle}) })
	defer timer.Stop()
	if hard > 0 {
		hctx, hcancel := context.WithTimeoutCause(cctx, hard, limitError{"longer than", hard})
		defer hcancel()
		cctx = hctx
	}
	creq := *req
	creq.Name = tool
	creq.Session = &progressSession{Session: ext.SessionOf(req.Session), timer: timer, idle: idle}
	res, err := c.c.CallTool(cctx, &creq)
	switch {
	case err == nil && res != nil:
		if len(req.Task) > 0 {
			return namespaceTaskResult(server, res), nil
		}
		return res, nil
	case err == nil:
		return ext.ErrorResult("MCP server %q returned no result for tool %q", server, tool), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("calling %q: %w", fullName, ctx.Err())
	case cctx.Err() != nil && context.Cause(cctx) != nil && !errors.Is(context.Cause(cctx), context.Canceled):
		return ext.ErrorResult("MCP server %q did not finish tool %q: %v", server, tool, context.Cause(cctx)), nil
	}
	return ext.ErrorResult("MCP server %q failed to run tool %q: %v", server, tool, err), nil
}

// limitError is why a call was cut: built on every call, formatted only
// when one is (fmt.Errorf per call measured 8% of ext-mcp's CPU).
type limitError struct {
	what string
	d    time.Duration
}

func (e limitError) Error() string { return e.what + " " + e.d.String() }

// limits returns c's idle limit and hard bound for a call.
func (c *conn) limits(e *Engine) (idle, hard time.Duration) {
	c.u.mu.Lock()
	defer c.u.mu.Unlock()
	idle = c.decl.Timeout
	if idle <= 0 {
		idle = e.opts.DefaultCallTimeout
	}
	return idle, c.decl.MaxDuration
}

// progressSession sees the progress a call reports, to restart its idle
// clock (timer, of the idle limit), and passes everything on.
type progressSession struct {
	ext.Session
	timer *time.Timer
	idle  time.Duration
}

func (s *progressSession) Notify(ctx context.Context, method string, params json.RawMessage) error {
	if method == ext.MethodProgress {
		s.timer.Reset(s.idle)
	}
	return s.Session.Notify(ctx, method, params)
}

// acquire finds user's live connection to server and counts a request on
// it (release ends it). has says whether the connection serves the
// request; when it does not, the error wraps [ext.ErrNotFound]. A retired
// or quarantined server answers with an error result (refused) instead.
func (e *Engine) acquire(userID, server string, has func(*conn) bool) (c *conn, refused *ext.CallToolResult, err error) {
	u, err := e.existingUser(userID)
	if err != nil {
		return nil, nil, err
	}
	if u == nil {
		return nil, nil, fmt.Errorf("user %q has no active catalog: %w", userID, ext.ErrNotFound)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	c = u.conns[server]
	if c == nil {
		disabled := u.disabled[server]
		q := u.quarantine[server]
		switch {
		case q != nil && q.signIn:
			return nil, ext.ErrorResult("MCP server %q needs sign-in: %s", server, q.reason), nil
		case q != nil:
			return nil, ext.ErrorResult("MCP server %q is unavailable: %s", server, q.reason), nil
		case disabled:
			return nil, disabledResult(server), nil
		}
		return nil, nil, fmt.Errorf("server %q: %w", server, ext.ErrNotFound)
	}
	if has != nil && !has(c) {
		return nil, nil, fmt.Errorf("server %q: %w", server, ext.ErrNotFound)
	}
	c.inflight++
	return c, nil, nil
}

// refusal turns a retired or quarantined server's answer into an error for
// requests that have no error result (prompts, resources).
func refusal(r *ext.CallToolResult) error {
	return fmt.Errorf("%s: %w", r.Text(), ext.ErrUnavailable)
}

// feature returns c's connection as a FeatureConn, or an error naming the
// server.
func (c *conn) feature() (FeatureConn, error) {
	fc, ok := c.c.(FeatureConn)
	if !ok {
		return nil, fmt.Errorf("MCP server %q offers no prompts or resources: %w", c.name, ext.ErrNotFound)
	}
	return fc, nil
}

// GetPrompt renders the prompt req.Name ("server/prompt") for req.User.
func (e *Engine) GetPrompt(ctx context.Context, req *ext.GetPromptRequest) (json.RawMessage, error) {
	server, name, ok := strings.Cut(req.Name, "/")
	if !ok || req.User == "" {
		return nil, fmt.Errorf("prompt %q: %w", req.Name, ext.ErrNotFound)
	}
	c, refused, err := e.acquire(req.User, server, func(c *conn) bool { _, ok := c.prompts[name]; return ok })
	if refused != nil {
		return nil, refusal(refused)
	}
	if err != nil {
		return nil, fmt.Errorf("prompt %q: %w", req.Name, err)
	}
	defer e.release(c)
	fc, err := c.feature()
	if err != nil {
		return nil, err
	}
	r := *req
	r.Name = name
	return fc.GetPrompt(ctx, &r)
}

// ReadResource reads req.URI for req.User: from the server that listed it,
// else from each server with templates (in name order) until one serves
// it.
func (e *Engine) ReadResource(ctx context.Context, req *ext.ReadResourceRequest) (json.RawMessage, error) {
	var out json.RawMessage
	err := e.onResource(req.User, req.URI, func(fc FeatureConn) (err error) {
		out, err = fc.ReadResource(ctx, req)
		return err
	})
	return out, err
}

// SubscribeResource starts or stops a server's updates of uri for user.
func (e *Engine) SubscribeResource(ctx context.Context, user, uri string, unsubscribe bool) error {
	return e.onResource(user, uri, func(fc FeatureConn) error {
		return fc.SubscribeResource(ctx, uri, unsubscribe)
	})
}

// onResource runs fn on the connections that may serve uri for user.
func (e *Engine) onResource(userID, uri string, fn func(FeatureConn) error) error {
	u, err := e.existingUser(userID)
	if err != nil {
		return err
	}
	if u == nil || userID == "" {
		return fmt.Errorf("resource %q: %w", uri, ext.ErrNotFound)
	}
	u.mu.Lock()
	names := make([]string, 0, len(u.conns))
	var exact string
	for name, c := range u.conns {
		if _, ok := c.uris[uri]; ok && (exact == "" || name < exact) {
			exact = name
		}
		if c.extras != nil && len(c.extras.Templates) > 0 {
			names = append(names, name)
		}
	}
	u.mu.Unlock()
	slices.Sort(names)
	if exact != "" {
		names = []string{exact}
	}
	for _, name := range names {
		c, refused, err := e.acquire(userID, name, nil)
		if refused != nil || err != nil {
			continue
		}
		fc, ferr := c.feature()
		if ferr == nil {
			ferr = fn(fc)
		}
		e.release(c)
		if !errors.Is(ferr, ext.ErrNotFound) {
			return ferr
		}
	}
	return fmt.Errorf("resource %q: %w", uri, ext.ErrNotFound)
}

// Complete answers completion/complete for user: a prompt ref
// ("server/prompt") goes to its server with the server's own name, a
// resource ref to the server that listed the template or resource.
func (e *Engine) Complete(ctx context.Context, user string, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("completion params: %w", ext.Mark(err, ext.ErrInvalidArgument))
	}
	var ref struct {
		Type string `json:"type"`
		Name string `json:"name"`
		URI  string `json:"uri"`
	}
	if err := json.Unmarshal(p["ref"], &ref); err != nil {
		return nil, fmt.Errorf("completion ref: %w", ext.Mark(err, ext.ErrInvalidArgument))
	}
	var (
		server string
		has    func(*conn) bool
	)
	switch ref.Type {
	case "ref/prompt":
		var name string
		var ok bool
		server, name, ok = strings.Cut(ref.Name, "/")
		if !ok {
			return nil, fmt.Errorf("prompt %q: %w", ref.Name, ext.ErrNotFound)
		}
		has = func(c *conn) bool { _, ok := c.prompts[name]; return ok }
		ref.Name = name
		b, err := json.Marshal(ref)
		if err != nil {
			return nil, err
		}
		p["ref"] = b
		if params, err = json.Marshal(p); err != nil {
			return nil, err
		}
	case "ref/resource":
		server = e.templateServer(user, ref.URI)
	default:
		return nil, fmt.Errorf("completion ref type %q: %w", ref.Type, ext.ErrInvalidArgument)
	}
	c, refused, err := e.acquire(user, server, has)
	if refused != nil {
		return nil, refusal(refused)
	}
	if err != nil {
		return nil, err
	}
	defer e.release(c)
	fc, err := c.feature()
	if err != nil {
		return nil, err
	}
	return fc.Complete(ctx, params, ext.SessionOf(sess))
}

// templateServer returns the first server (by name) of user that listed uri
// as a template or resource.
func (e *Engine) templateServer(userID, uri string) string {
	u, err := e.existingUser(userID)
	if err != nil || u == nil {
		return ""
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	best := ""
	for name, c := range u.conns {
		if c.extras == nil {
			continue
		}
		found := slices.ContainsFunc(c.extras.Templates, func(t NamedInfo) bool { return t.Name == uri }) ||
			slices.ContainsFunc(c.extras.Resources, func(r NamedInfo) bool { return r.Name == uri })
		if found && (best == "" || name < best) {
			best = name
		}
	}
	return best
}

// Task answers a tasks/* request of user. Task IDs are "server/id" as
// [Engine.Call] gave them; tasks/list merges every server's list.
func (e *Engine) Task(ctx context.Context, user, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	sess = ext.SessionOf(sess)
	if method == ext.MethodTaskList {
		return e.listTasks(ctx, user, sess)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("%s params: %w", method, ext.Mark(err, ext.ErrInvalidArgument))
	}
	var id string
	if err := json.Unmarshal(p["taskId"], &id); err != nil {
		return nil, fmt.Errorf("%s needs a taskId: %w", method, ext.ErrInvalidArgument)
	}
	server, own, ok := strings.Cut(id, "/")
	if !ok {
		return nil, fmt.Errorf("task %q: %w", id, ext.ErrNotFound)
	}
	c, refused, err := e.acquire(user, server, nil)
	if refused != nil {
		return nil, refusal(refused)
	}
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", id, err)
	}
	defer e.release(c)
	fc, err := c.feature()
	if err != nil {
		return nil, err
	}
	p["taskId"], _ = json.Marshal(own)
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	out, err := fc.Task(ctx, method, b, sess)
	if err != nil {
		return nil, err
	}
	if method == ext.MethodTaskResult {
		return out, nil // the tool's result: no task ID to rewrite
	}
	return namespaceTaskID(server, out), nil
}

func (e *Engine) listTasks(ctx context.Context, userID string, sess ext.Session) (json.RawMessage, error) {
	u, err := e.existingUser(userID)
	if err != nil {
		return nil, err
	}
	all := []json.RawMessage{}
	e.eachConn(u, userID, func(name string, c *conn) {
		fc, err := c.feature()
		var out json.RawMessage
		if err == nil {
			out, err = fc.Task(ctx, ext.MethodTaskList, json.RawMessage(`{}`), sess)
		}
		if err != nil {
			return // a server without tasks lists none
		}
		var l struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if json.Unmarshal(out, &l) == nil {
			for _, t := range l.Tasks {
				all = append(all, namespaceTaskID(name, t))
			}
		}
	})
	return json.Marshal(map[string]any{"tasks": all})
}

// namespaceTaskResult rewrites the task ID of a CreateTaskResult.
func namespaceTaskResult(server string, res *ext.CallToolResult) *ext.CallToolResult {
	b, err := res.JSON()
	if err != nil {
		return res
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil || top["task"] == nil {
		return res // the server ran it as a plain call
	}
	top["task"] = namespaceTaskID(server, top["task"])
	out, err := json.Marshal(top)
	if err != nil {
		return res
	}
	return &ext.CallToolResult{Raw: out, Details: res.Details}
}

// namespaceTaskID prefixes the taskId of a task object (or of an object
// with one) with "server/".
func namespaceTaskID(server string, obj json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return obj
	}
	var id string
	if json.Unmarshal(m["taskId"], &id) != nil {
		return obj
	}
	m["taskId"], _ = json.Marshal(server + "/" + id)
	out, err := json.Marshal(m)
	if err != nil {
		return obj
	}
	return out
}

// ForEach runs fn on each live connection of user (servers in name
// order), each held as a request in flight while fn runs.
func (e *Engine) ForEach(userID string, fn func(server string, c Conn)) {
	u, err := e.existingUser(userID)
	if err != nil {
		return
	}
	e.eachConn(u, userID, func(name string, c *conn) { fn(name, c.c) })
}

// eachConn runs fn on each live connection of u (nil: none), in server
// name order, each held as a request in flight while fn runs.
func (e *Engine) eachConn(u *user, userID string, fn func(server string, c *conn)) {
	if u == nil {
		return
	}
	u.mu.Lock()
	names := make([]string, 0, len(u.conns))
	for name := range u.conns {
		names = append(names, name)
	}
	u.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		c, refused, err := e.acquire(userID, name, nil)
		if refused != nil || err != nil {
			continue
		}
		fn(name, c)
		e.release(c)
	}
}

// release ends a call on c; the last call on a retired connection closes
// it.
func (e *Engine) release(c *conn) {
	u := c.u
	u.mu.Lock()
	c.inflight--
	closeNow := c.state == stateRetiring && c.inflight == 0
	if closeNow {
		c.state = stateClosing
		delete(u.retiring, c)
	}
	u.mu.Unlock()
	if closeNow {
		e.closeConns([]*conn{c})
	}
}

// Status reports on one user's servers, or on every active user's when
// user is empty (the operator's view, the only one with the details of an
// [OperatorOnlyError]): connected, retiring (draining), quarantined (with the
// reason and the next retry), waiting for a sign-in
// ([ext.StateNeedsSignIn], with how to sign in) and left out (with the
// reason).
func (e *Engine) Status(userID string) []ext.StatusEntry {
	e.mu.Lock()
	var users []*user
	if userID != "" {
		if u := e.users[userID]; u != nil {
			users = append(users, u)
		}
	} else {
		for _, u := range e.users {
			users = append(users, u)
		}
	}
	e.mu.Unlock()
	var out []ext.StatusEntry
	for _, u := range users {
		u.mu.Lock()
		shadowed := u.shadowedLocked()
		for name, c := range u.conns {
			reason := refusedReason(c.refused)
			if sh := shadowed[name]; sh != "" {
				reason = strings.TrimPrefix(reason+"; "+sh, "; ")
			}
			out = append(out, ext.StatusEntry{User: u.id, Name: name, State: "connected", Tools: len(c.built), Reason: reason})
		}
		for c := range u.retiring {
			out = append(out, ext.StatusEntry{User: u.id, Name: c.name, State: "retiring",
				Detail: fmt.Sprintf("draining %d running call(s)", c.inflight)})
		}
		for name, q := range u.quarantine {
			if q.signIn {
				out = append(out, ext.StatusEntry{User: u.id, Name: name, State: ext.StateNeedsSignIn, Reason: q.reason})
				continue
			}
			reason := q.reason
			if userID == "" && q.opReason != "" {
				reason = q.opReason
			}
			out = append(out, ext.StatusEntry{User: u.id, Name: name, State: "quarantined", Reason: reason,
				NextRetry: q.next, Detail: fmt.Sprintf("failed %d time(s)", q.failures)})
		}
		for _, p := range u.problems {
			out = append(out, ext.StatusEntry{User: u.id, Name: p.Server, State: "error", Reason: p.Reason})
		}
		u.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ext.StatusEntry) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.State, b.State)
	})
	return out
}

// shadowedLocked words, for each connected server of the user, the
// resource URIs and URI templates it offers that an earlier server (by
// name) offers too: the first server by name serves them (catalogLocked,
// onResource), so this one's are never read. u.mu must be held.
func (u *user) shadowedLocked() map[string]string {
	names := make([]string, 0, len(u.conns))
	for name := range u.conns {
		names = append(names, name)
	}
	slices.Sort(names)
	firstURI, firstTmpl := map[string]string{}, map[string]string{}
	out := map[string]string{}
	for _, name := range names {
		x := u.conns[name].extras
		if x == nil {
			continue
		}
		var lost []string
		for _, l := range []struct {
			infos []NamedInfo
			first map[string]string
			what  string
		}{{x.Resources, firstURI, "resource"}, {x.Templates, firstTmpl, "resource template"}} {
			for _, r := range l.infos {
				switch by, seen := l.first[r.Name]; {
				case !seen:
					l.first[r.Name] = name
				case by != name:
					lost = append(lost, fmt.Sprintf("%s %q is served by %s", l.what, r.Name, by))
				}
			}
		}
		if len(lost) > 0 {
			out[name] = "shadowed (the first server by name serves a URI two offer): " + strings.Join(lost, ", ")
		}
	}
	return out
}

// refusedReason words the tools of a connected server that were refused
// for the control characters in their names (already escaped), or is
// empty.
func refusedReason(refused []string) string {
	if len(refused) == 0 {
		return ""
	}
	return fmt.Sprintf("refused %d tool(s) whose name has control characters: \"%s\"", len(refused), strings.Join(refused, `", "`))
}
