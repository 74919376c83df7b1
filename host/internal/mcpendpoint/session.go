package mcpendpoint

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// session is one MCP session: its own go-sdk server, whose tool list is
// this session's view of the user's table (direct tools, the deferred
// tools it found, and search_tools). A server per session is what lets
// go-sdk send tools/list_changed to exactly the sessions whose list
// changed.
type session struct {
	e      *Endpoint
	u      *userState
	p      Principal
	id     string // the Mcp-Session-Id, from crypto/rand
	conv   string // the conversation the host records for calls
	server *mcp.Server

	ctx    context.Context // cancelled when the session closes
	cancel context.CancelFunc

	revoked atomic.Bool // its token was revoked, or the endpoint closed

	// Guarded by Endpoint.mu.
	ss      *mcp.ServerSession // set by a successful initialize
	dropped bool

	// Guarded by u.mu.
	found        map[string]bool   // originals of deferred tools it found
	registered   map[string]*entry // what its server lists, by MCP name
	searchListed bool
}

// errRevoked answers requests on a session that is closing.
var errRevoked = errors.New("the session is closed: its token was revoked or the endpoint is shutting down")

// newSession builds the server of a session that go-sdk is about to open
// for principal p, or returns nil once the endpoint closed. The session
// holds a reference to u until it is dropped.
func (e *Endpoint) newSession(u *userState, p Principal) *session {
	s := &session{e: e, u: u, p: p, id: rand.Text(), found: map[string]bool{}, registered: map[string]*entry{}}
	s.conv = "mcp:" + s.id
	s.ctx, s.cancel = context.WithCancel(e.ctx)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		s.cancel()
		return nil
	}
	e.sessions[s] = struct{}{}
	u.refs++
	e.mu.Unlock()

	opts := &mcp.ServerOptions{
		Logger:                    e.log,
		SupportedProtocolVersions: protocolVersions,
		// Tools only, with list_changed; no logging capability.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		GetSessionID: func() string { return s.id },
	}
	if t := u.table.Load(); len(t.deferred) > 0 {
		opts.Instructions = "More tools are available than are listed: call search_tools with keywords to find them. " +
			"Tools it finds join your tool list and can be called by name."
	}
	s.server = mcp.NewServer(e.impl, opts)
	s.server.AddReceivingMiddleware(s.middleware)
	// No session is connected yet, so filling the list sends nothing.
	u.mu.Lock()
	u.sessions[s] = struct{}{}
	s.syncLocked(u.table.Load())
	u.mu.Unlock()
	return s
}

// middleware binds the session on initialize and routes tools/call
// through the user's table, so that a call never depends on parsing a
// name and codemode or not-yet-found deferred tools get a clear answer.
func (s *session) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if s.revoked.Load() {
			return nil, errRevoked
		}
		switch method {
		case "tools/call":
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				if ent := s.u.table.Load().byName[r.Params.Name]; ent != nil {
					return s.call(ctx, ent, r.Params.Arguments), nil
				}
			}
			// search_tools, or an unknown name: go-sdk answers -32602.
		case "initialize":
			ss, _ := req.GetSession().(*mcp.ServerSession)
			if err := s.bind(ss); err != nil {
				return nil, err
			}
		}
		return next(ctx, method, req)
	}
}

// bind records the go-sdk session and watches for its end.
func (s *session) bind(ss *mcp.ServerSession) error {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case ss == nil:
		return errors.New("mcpendpoint: initialize without a session")
	case s.revoked.Load() || s.dropped || e.closed:
		return errRevoked
	case s.ss != nil:
		return nil // a repeated initialize; go-sdk answers it
	}
	s.ss = ss
	e.byID[s.id] = s
	e.open.Add(1)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = ss.Wait()
		e.drop(s)
	}()
	return nil
}

// close cancels the session's calls and closes it.
func (s *session) close() {
	s.cancel()
	s.e.mu.Lock()
	ss := s.ss
	s.e.mu.Unlock()
	if ss != nil {
		_ = ss.Close() // waits for its requests, which were just cancelled
	}
	s.e.drop(s)
}

// drop forgets a session (once) and releases its hold on the user.
func (e *Endpoint) drop(s *session) {
	e.mu.Lock()
	if s.dropped {
		e.mu.Unlock()
		return
	}
	s.dropped = true
	delete(e.sessions, s)
	if e.byID[s.id] == s {
		delete(e.byID, s.id)
	}
	if s.ss != nil {
		e.open.Add(-1)
	}
	e.mu.Unlock()
	s.cancel()
	s.u.mu.Lock()
	delete(s.u.sessions, s)
	s.u.mu.Unlock()
	e.release(s.u)
}

// syncLocked makes the session's server list what t offers it. go-sdk
// debounces the changes into one tools/list_changed for this session.
func (s *session) syncLocked(t *toolTable) {
	want := make(map[string]*entry, len(t.entries))
	for _, ent := range t.entries {
		if ent.tool != nil && (ent.exposure == ext.ExposureDirect || ent.exposure == ext.ExposureDeferred && s.found[ent.original]) {
			want[ent.name] = ent
		}
	}
	var remove []string
	for name, ent := range s.registered {
		if want[name] != ent {
			remove = append(remove, name)
			delete(s.registered, name)
		}
	}
	wantSearch := len(t.deferred) > 0
	if s.searchListed && !wantSearch {
		remove = append(remove, searchToolName)
		s.searchListed = false
	}
	if len(remove) > 0 {
		s.server.RemoveTools(remove...)
	}
	for name, ent := range want {
		if s.registered[name] == ent {
			continue
		}
		if err := addTool(s.server, ent.tool, s.handler(ent)); err != nil {
			s.e.log.Warn("mcp: leaving out a tool go-sdk refuses", "user", s.p.User, "tool", ent.original, "err", err)
			continue
		}
		s.registered[name] = ent
	}
	if wantSearch && !s.searchListed {
		if err := addTool(s.server, searchTool, s.searchTools); err != nil {
			s.e.log.Error("mcp: adding search_tools", "err", err)
			return
		}
		s.searchListed = true
	}
}

// handler serves a listed tool that left the user's table an instant
// before the session's list caught up (the middleware serves the rest).
func (s *session) handler(ent *entry) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return s.call(ctx, ent, req.Params.Arguments), nil
	}
}

// call runs one tool through the host. Arguments go out and content comes
// back as raw JSON. Host errors become error results that name only the
// tool the client asked for.
func (s *session) call(ctx context.Context, ent *entry, args json.RawMessage) *mcp.CallToolResult {
	if ent.exposure == ext.ExposureCodemode {
		return errorResult(fmt.Sprintf("tool %q is only callable from code", ent.name))
	}
	// The call ends with the session, too: a revoked token stops its calls.
	callCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	res, err := s.e.host.Call(callCtx, s.p.User, s.conv, ent.original, args)
	stop()
	cancel()
	if err == nil && res == nil {
		err = fmt.Errorf("the host returned no result: %w", ext.ErrUnavailable)
	}
	if err != nil {
		return s.callError(ctx, ent, err)
	}
	out, ok := toMCP(res)
	if !ok {
		s.e.log.Warn("mcp: a tool returned content that is not a JSON array of blocks", "user", s.p.User, "tool", ent.original)
		return errorResult(fmt.Sprintf("tool %q returned malformed content", ent.name))
	}
	return out
}

// callError words a failed call for the model. The host's own message may
// name internals, so it goes to the log only.
func (s *session) callError(ctx context.Context, ent *entry, err error) *mcp.CallToolResult {
	var msg string
	switch {
	case s.ctx.Err() != nil:
		msg = "the session was closed during the call of tool %q"
	case errors.Is(err, context.DeadlineExceeded):
		msg = "tool %q timed out"
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		msg = "the call of tool %q was cancelled"
	case errors.Is(err, ext.ErrNotFound):
		msg = "tool %q is no longer available: list the tools again"
	case errors.Is(err, ext.ErrPermission):
		msg = "you are not allowed to use tool %q"
	case errors.Is(err, ext.ErrInvalidArgument):
		msg = "invalid arguments for tool %q: they must be a JSON object that matches its input schema"
	case errors.Is(err, ext.ErrUnavailable), errors.Is(err, ext.ErrUnimplemented):
		msg = "tool %q is unavailable right now: try again later"
	default:
		msg = "tool %q failed with an internal error"
	}
	s.e.log.Warn("mcp: a tool call failed", "user", s.p.User, "tool", ent.original, "err", err)
	return errorResult(fmt.Sprintf(msg, ent.name))
}

// searchTool is the endpoint's own tool, listed to the sessions of users
// who have deferred tools.
var searchTool = &mcp.Tool{
	Name:  searchToolName,
	Title: "Search tools",
	Description: "Find more tools by keywords, matched against tool names and descriptions. " +
		"The tools found join your tool list and can then be called by name.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"query":{"type":"string","description":"Keywords, separated by spaces."},` +
		`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"The most tools to return (default 10)."}},` +
		`"required":["query"]}`),
	OutputSchema: json.RawMessage(`{"type":"object","properties":{"tools":{"type":"array","items":{"type":"object",` +
		`"properties":{"name":{"type":"string"},"description":{"type":"string"}},"required":["name"]}}},"required":["tools"]}`),
	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
}

const (
	defaultSearchLimit = 10
	maxSearchLimit     = 50
)

// searchIn is search_tools' input.
type searchIn struct {
	Query string `json:"query"`
	Limit int    `json:"limit"`
}

// searchOut is search_tools' structured output.
type searchOut struct {
	Tools []searchHit `json:"tools"`
}

type searchHit struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// searchTools ranks the user's deferred tools by how many keywords they
// contain, adds the best ones to this session's list and lists them.
func (s *session) searchTools(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in searchIn
	if len(req.Params.Arguments) > 0 {
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return errorResult(`search_tools takes {"query": string, "limit"?: integer}: ` + err.Error()), nil
		}
	}
	terms := strings.Fields(strings.ToLower(in.Query))
	if len(terms) == 0 {
		return errorResult("search_tools needs a query: give one or more keywords"), nil
	}
	limit := in.Limit
	if limit <= 0 {
		limit = defaultSearchLimit
	}
	limit = min(limit, maxSearchLimit)

	type scored struct {
		ent   *entry
		score int
	}
	var hits []scored
	s.u.mu.Lock()
	t := s.u.table.Load()
	for _, ent := range t.deferred {
		n := 0
		for _, term := range terms {
			if strings.Contains(ent.search, term) {
				n++
			}
		}
		if n > 0 {
			hits = append(hits, scored{ent, n})
		}
	}
	slices.SortStableFunc(hits, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	hits = hits[:min(len(hits), limit)]
	for _, h := range hits {
		s.found[h.ent.original] = true
	}
	s.syncLocked(t)
	s.u.mu.Unlock()

	out := searchOut{Tools: make([]searchHit, 0, len(hits))}
	var text strings.Builder
	if len(hits) == 0 {
		text.WriteString("No tools match " + strconvQuote(in.Query) + ". Try other keywords.")
	} else {
		fmt.Fprintf(&text, "Found %d tool(s); they are now in your tool list:", len(hits))
		for _, h := range hits {
			out.Tools = append(out.Tools, searchHit{Name: h.ent.name, Description: h.ent.src.Description})
			text.WriteString("\n- " + h.ent.name)
			if d := h.ent.src.Description; d != "" {
				text.WriteString(": " + d)
			}
		}
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: text.String()}},
		StructuredContent: out,
	}, nil
}

// strconvQuote quotes a user's query for a message, clipped.
func strconvQuote(s string) string { return fmt.Sprintf("%q", clip(s, 200)) }
