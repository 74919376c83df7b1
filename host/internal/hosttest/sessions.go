package hosttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// Catalog is what a user has beside tools: prompts, resources, resource
// templates and instructions, as extensions would publish them.
type Catalog struct {
	Prompts      []api.Prompt
	Resources    []api.Resource
	Templates    []api.ResourceTemplate
	Instructions []api.Instruction
}

// CallToolFunc answers a tool call with the client's whole request, its
// session included (see [Host.SetCallTool]).
type CallToolFunc func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error)

// TaskFunc answers a tasks/* request (see [Host.SetTask]).
type TaskFunc func(ctx context.Context, user, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error)

// SessionNote is a notification a client sent to the host
// ([Host.SessionNotify]).
type SessionNote struct {
	User, Method string
	Params       json.RawMessage
}

// extras is the Host's state beside tools and settings; guarded by
// Host.mu.
type extras struct {
	catalog  map[string]Catalog
	catSubs  map[string]map[chan struct{}]struct{}
	callTool CallToolFunc
	task     TaskFunc
	attached map[string]map[*attached]struct{}
	seq      uint64
	resSubs  map[string]map[string]int // user → uri → subscribers
	notes    []SessionNote
}

type attached struct {
	s    ext.Session
	last uint64
}

func (x *extras) init() {
	x.catalog = map[string]Catalog{}
	x.catSubs = map[string]map[chan struct{}]struct{}{}
	x.attached = map[string]map[*attached]struct{}{}
	x.resSubs = map[string]map[string]int{}
}

// SetCallTool answers tool calls with fn, which sees the client's
// session (progress, requests to the client); nil restores SetCall's
// answer or the echo.
func (h *Host) SetCallTool(fn CallToolFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x.callTool = fn
}

// SetTask answers tasks/* requests with fn; nil makes every task unknown
// ([ext.ErrNotFound]).
func (h *Host) SetTask(fn TaskFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x.task = fn
}

// SetCatalog replaces the user's prompts, resources, templates and
// instructions (sorted the way the host sorts them) and announces the
// change to the user's catalog subscribers.
func (h *Host) SetCatalog(user string, c Catalog) {
	c.Prompts = slices.Clone(c.Prompts)
	c.Resources = slices.Clone(c.Resources)
	c.Templates = slices.Clone(c.Templates)
	c.Instructions = slices.Clone(c.Instructions)
	sort.Slice(c.Prompts, func(i, j int) bool { return c.Prompts[i].Name < c.Prompts[j].Name })
	sort.Slice(c.Resources, func(i, j int) bool { return c.Resources[i].URI < c.Resources[j].URI })
	sort.Slice(c.Templates, func(i, j int) bool { return c.Templates[i].URITemplate < c.Templates[j].URITemplate })
	sort.Slice(c.Instructions, func(i, j int) bool {
		a, b := c.Instructions[i], c.Instructions[j]
		return a.Extension < b.Extension || a.Extension == b.Extension && a.Source < b.Source
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x.catalog[user] = c
	for ch := range h.x.catSubs[user] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Task answers a tasks/* request with the [TaskFunc] of SetTask.
func (h *Host) Task(ctx context.Context, user, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	h.mu.Lock()
	fn := h.x.task
	h.mu.Unlock()
	if fn == nil {
		return nil, fmt.Errorf("%s for user %q: no such task: %w", method, user, ext.ErrNotFound)
	}
	return fn(ctx, user, method, params, sess)
}

// Prompts returns the user's prompts, sorted by name.
func (h *Host) Prompts(ctx context.Context, user string) ([]api.Prompt, error) {
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.x.catalog[user].Prompts), nil
}

// GetPrompt renders one of the user's prompts as an echo: one user
// message "<user> <name> <args>".
func (h *Host) GetPrompt(ctx context.Context, req *api.PromptRequest) (json.RawMessage, error) {
	if err := h.ensureActive(ctx, req.User); err != nil {
		return nil, err
	}
	h.mu.Lock()
	known := slices.ContainsFunc(h.x.catalog[req.User].Prompts, func(p api.Prompt) bool { return p.Name == req.Name })
	h.mu.Unlock()
	if !known {
		return nil, fmt.Errorf("prompt %q for user %q: %w", req.Name, req.User, ext.ErrNotFound)
	}
	args := req.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	text, _ := json.Marshal(req.User + " " + req.Name + " " + string(args))
	return json.RawMessage(`{"description":"an echo","messages":[{"role":"user","content":{"type":"text","text":` + string(text) + `}}]}`), nil
}

// Resources returns the user's resources and templates, sorted.
func (h *Host) Resources(ctx context.Context, user string) ([]api.Resource, []api.ResourceTemplate, error) {
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.x.catalog[user]
	return slices.Clone(c.Resources), slices.Clone(c.Templates), nil
}

// servesLocked reports whether user has uri: a resource, or a URI that
// starts like one of the templates (the part before its first "{").
func (h *Host) servesLocked(user, uri string) bool {
	c := h.x.catalog[user]
	if slices.ContainsFunc(c.Resources, func(r api.Resource) bool { return r.URI == uri }) {
		return true
	}
	return slices.ContainsFunc(c.Templates, func(t api.ResourceTemplate) bool {
		prefix, _, _ := strings.Cut(t.URITemplate, "{")
		return prefix != t.URITemplate && strings.HasPrefix(uri, prefix)
	})
}

// ReadResource reads one of the user's resources as an echo: one text
// content "<user> <uri>".
func (h *Host) ReadResource(ctx context.Context, req *api.ResourceRequest) (json.RawMessage, error) {
	if err := h.ensureActive(ctx, req.User); err != nil {
		return nil, err
	}
	h.mu.Lock()
	ok := h.servesLocked(req.User, req.URI)
	h.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("resource %q for user %q: %w", req.URI, req.User, ext.ErrNotFound)
	}
	uri, _ := json.Marshal(req.URI)
	text, _ := json.Marshal(req.User + " " + req.URI)
	return json.RawMessage(`{"contents":[{"uri":` + string(uri) + `,"mimeType":"text/plain","text":` + string(text) + `}]}`), nil
}

// SubscribeResource counts one subscriber of a resource of user (or, with
// unsubscribe, one fewer). A URI the user does not have is
// [ext.ErrNotFound].
func (h *Host) SubscribeResource(_ context.Context, user, uri string, unsubscribe bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.servesLocked(user, uri) {
		return fmt.Errorf("resource %q for user %q: %w", uri, user, ext.ErrNotFound)
	}
	m := h.x.resSubs[user]
	if m == nil {
		m = map[string]int{}
		h.x.resSubs[user] = m
	}
	if unsubscribe {
		m[uri]--
	} else {
		m[uri]++
	}
	if m[uri] <= 0 {
		delete(m, uri)
	}
	if len(m) == 0 {
		delete(h.x.resSubs, user)
	}
	return nil
}

// ResourceSubscribers returns how many subscribers each of user's
// resources has.
func (h *Host) ResourceSubscribers(user string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.x.resSubs[user] {
		out[k] = v
	}
	return out
}

// Complete answers a completion request with one value: "<user>:<the
// ref's name or URI>:<the argument's value>".
func (h *Host) Complete(ctx context.Context, user string, params json.RawMessage, _ ext.Session) (json.RawMessage, error) {
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	var p struct {
		Ref struct {
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"ref"`
		Argument struct {
			Value string `json:"value"`
		} `json:"argument"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("completion params: %w", ext.Mark(err, ext.ErrInvalidArgument))
	}
	v, _ := json.Marshal(user + ":" + p.Ref.Name + p.Ref.URI + ":" + p.Argument.Value)
	return json.RawMessage(`{"completion":{"values":[` + string(v) + `],"total":1,"hasMore":false}}`), nil
}

// Instructions returns the user's instructions.
func (h *Host) Instructions(ctx context.Context, user string) ([]api.Instruction, error) {
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.x.catalog[user].Instructions), nil
}

// SubscribeCatalog returns a channel that receives a value (coalesced)
// whenever SetCatalog changes the user's catalog, until cancel is called.
func (h *Host) SubscribeCatalog(user string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.x.catSubs[user] == nil {
		h.x.catSubs[user] = map[chan struct{}]struct{}{}
	}
	h.x.catSubs[user][ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.x.catSubs[user], ch)
			if len(h.x.catSubs[user]) == 0 {
				delete(h.x.catSubs, user)
			}
		})
	}
}

// CatalogSubscribers returns how many catalog subscriptions of user are
// open.
func (h *Host) CatalogSubscribers(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.x.catSubs[user])
}

// AttachSession registers an open client session of user, as the host
// does: [Host.Notify] reaches it and [Host.RequestUser] may ask it (the
// most recently touched first).
func (h *Host) AttachSession(user string, s ext.Session) (touch, detach func()) {
	a := &attached{s: s}
	h.mu.Lock()
	h.x.seq++
	a.last = h.x.seq
	if h.x.attached[user] == nil {
		h.x.attached[user] = map[*attached]struct{}{}
	}
	h.x.attached[user][a] = struct{}{}
	h.mu.Unlock()
	touch = func() {
		h.mu.Lock()
		h.x.seq++
		a.last = h.x.seq
		h.mu.Unlock()
	}
	var once sync.Once
	detach = func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.x.attached[user], a)
			if len(h.x.attached[user]) == 0 {
				delete(h.x.attached, user)
			}
		})
	}
	return touch, detach
}

// Attached returns how many sessions of user are attached.
func (h *Host) Attached(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.x.attached[user])
}

func (h *Host) attachedOf(user string) []*attached {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*attached, 0, len(h.x.attached[user]))
	for a := range h.x.attached[user] {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].last > out[j].last })
	return out
}

// Notify hands a notification to every attached session of user, as an
// extension's [ext.Host.Notify] does through the host.
func (h *Host) Notify(ctx context.Context, user, method string, params json.RawMessage) {
	for _, a := range h.attachedOf(user) {
		_ = a.s.Notify(ctx, method, params)
	}
}

// RequestUser asks the most recently touched attached session of user
// that declared the capability method needs, as an extension's
// [ext.Host.RequestUser] does through the host.
func (h *Host) RequestUser(ctx context.Context, user, method string, params json.RawMessage) (json.RawMessage, error) {
	need := ext.SessionCapability(method)
	for _, a := range h.attachedOf(user) {
		if ext.HasCapability(a.s.Capabilities(), need) {
			return a.s.Request(ctx, method, params)
		}
	}
	return nil, fmt.Errorf("user %q has no open client session that declared %q: %w", user, need, ext.ErrUnavailable)
}

// SessionNotify records a notification a client of user sent.
func (h *Host) SessionNotify(_ context.Context, user, method string, params json.RawMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x.notes = append(h.x.notes, SessionNote{User: user, Method: method, Params: slices.Clone(params)})
	return nil
}

// SessionNotes returns the notifications clients sent so far.
func (h *Host) SessionNotes() []SessionNote {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.x.notes)
}
