// Package hosttest provides [Host], an in-memory host for the tests of the
// host's surfaces (the MCP endpoint, the web UI and JSON API, the control
// socket, package serve). It implements every surface's interface
// (mcpendpoint.Host, web.Host, control.Host) with real behaviour, not
// stubs: settings are validated by package settings against the sections'
// forms and kept per user with their secrets, tools are kept per user and
// announce their changes, calls are recorded and answered (with the
// client's session), users are activated on first use and refreshed after
// their settings change, and prompts, resources, templates, instructions
// (announced too), resource subscriptions, completions, tasks and attached
// client sessions work per user, the way package host does it.
//
// What the extensions would compute (a user's tools and status from their
// settings) a test supplies: with [Host.SetTools], [Host.SetStatus] and
// [Host.SetCatalog], or with an [Options.Activate] hook that derives them
// as an extension would; [Host.SetCallTool] and [Host.SetTask] answer as
// an extension would, and [Host.Notify] and [Host.RequestUser] reach the
// attached sessions as an extension's would.
//
// A Host is safe for concurrent use.
package hosttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/settings"
)

// Options configures [New]; nil means none of them.
type Options struct {
	// Sections are the extensions' settings sections.
	Sections []api.Section
	// Extensions describe the extensions; an extension named here or in
	// Sections is known (secrets of unknown extensions are refused).
	Extensions []api.ExtensionInfo
	// Overview is the operator's summary; its Extensions are Extensions.
	Overview api.Overview
	// Activate, when set, runs as the host activates a user: on the user's
	// first Tools, Call or Status, and again after each change of their
	// settings or secrets. It typically sets the user's tools and status
	// from their settings ([Host.Stored]). An error fails the call that
	// activated, and the next one tries again.
	Activate func(ctx context.Context, h *Host, user string) error
	_        struct{}
}

// Call is one recorded tool call.
type Call struct {
	User, Conversation, Name string
	// Args is the arguments' JSON text.
	Args string
	// ProgressToken and Task are the client's, as JSON text ("" for none).
	ProgressToken, Task string
}

// CallFunc answers a tool call in place of the default echo.
type CallFunc func(ctx context.Context, user, name string, args json.RawMessage) (*ext.CallToolResult, error)

// Host is the in-memory host. Its zero value is not usable: call [New].
type Host struct {
	opts Options

	mu       sync.Mutex
	active   map[string]*activation
	tools    map[string][]api.Tool
	status   map[string][]api.StatusEntry
	toolsErr map[string]error
	values   map[string]json.RawMessage // user/ext/section
	secrets  map[string]string          // user/ext/name
	subs     map[string]map[chan struct{}]struct{}
	calls    []Call
	log      []string
	callFn   CallFunc
	x        extras // prompts, resources, sessions: sessions.go
}

type activation struct {
	done chan struct{}
	err  error
}

// New returns a host with opts.
func New(opts *Options) *Host {
	h := &Host{
		active: map[string]*activation{}, tools: map[string][]api.Tool{}, status: map[string][]api.StatusEntry{},
		toolsErr: map[string]error{}, values: map[string]json.RawMessage{}, secrets: map[string]string{},
		subs: map[string]map[chan struct{}]struct{}{},
	}
	h.x.init()
	if opts != nil {
		h.opts = *opts
	}
	h.opts.Overview.Extensions = h.opts.Extensions
	return h
}

// ensureActive activates user once; concurrent callers wait for the same
// activation, and a failed one is tried again by the next caller.
func (h *Host) ensureActive(ctx context.Context, user string) error {
	h.mu.Lock()
	a, ok := h.active[user]
	if !ok {
		a = &activation{done: make(chan struct{})}
		h.active[user] = a
	}
	h.mu.Unlock()
	if !ok {
		if h.opts.Activate != nil {
			a.err = h.opts.Activate(ctx, h, user)
		}
		if a.err != nil {
			h.mu.Lock()
			delete(h.active, user)
			h.mu.Unlock()
		}
		close(a.done)
		return a.err
	}
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Refresh runs the Activate hook again for an active user, as the host
// does after their settings or secrets changed.
func (h *Host) Refresh(ctx context.Context, user string) error {
	h.mu.Lock()
	_, active := h.active[user]
	h.mu.Unlock()
	if !active || h.opts.Activate == nil {
		return nil
	}
	return h.opts.Activate(ctx, h, user)
}

// SetTools replaces the user's tools (filling the defaults the host's
// registry fills) and announces the change to the user's subscribers.
func (h *Host) SetTools(user string, tools ...api.Tool) {
	out := slices.Clone(tools)
	for i := range out {
		out[i].Tool = api.WithDefaults(out[i].Tool)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tools[user] = out
	for _, set := range []map[chan struct{}]struct{}{h.subs[user], h.subs[""]} {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default: // one pending event is enough
			}
		}
	}
}

// SetStatus replaces the user's status lines. They are returned as they
// are, even lines of another user: a surface must filter them.
func (h *Host) SetStatus(user string, entries ...api.StatusEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status[user] = slices.Clone(entries)
}

// FailTools makes Tools fail for user with err; nil lets it succeed again.
func (h *Host) FailTools(user string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.toolsErr, user)
		return
	}
	h.toolsErr[user] = err
}

// SetCall answers tool calls with fn; nil restores the echo (see Call).
func (h *Host) SetCall(fn CallFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.callFn = fn
}

// Calls returns the tool calls made so far.
func (h *Host) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// Log returns the changes made so far, one line each, such as
// "SetSettings alice mcp servers" or "SetSecret alice mcp token:notes".
func (h *Host) Log() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

// Subscribers returns how many subscriptions to user's changes are open.
func (h *Host) Subscribers(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[user])
}

// Stored returns the stored values of a user's section, "" when none.
func (h *Host) Stored(user, extension, section string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.values[key(user, extension, section)])
}

// Secret returns a user's secret and whether it is set.
func (h *Host) Secret(user, extension, name string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.secrets[key(user, extension, name)]
	return v, ok
}

func key(user, extension, name string) string { return user + "/" + extension + "/" + name }

// Tools returns the user's tools, sorted by name, activating the user on
// first use.
func (h *Host) Tools(ctx context.Context, user string) ([]api.Tool, error) {
	h.mu.Lock()
	err := h.toolsErr[user]
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := h.ensureActive(ctx, user); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.tools[user]), nil
}

// Call records the call and answers it: a tool the user does not have is
// [ext.ErrNotFound]; otherwise the [CallToolFunc] of SetCallTool answers,
// else the [CallFunc] of SetCall, else the echo: a text block "<user>
// <name> <args>" and structured content {"user", "tool", "args"}.
func (h *Host) Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error) {
	return h.CallTool(ctx, &api.CallRequest{User: user, Conversation: conversation, Name: name, Arguments: args})
}

// CallTool is [Host.Call] with the client's whole request: its progress
// token, _meta, task parameters and session reach the [CallToolFunc].
func (h *Host) CallTool(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
	if err := h.ensureActive(ctx, req.User); err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.calls = append(h.calls, Call{User: req.User, Conversation: req.Conversation, Name: req.Name, Args: string(req.Arguments),
		ProgressToken: string(req.ProgressToken), Task: string(req.Task)})
	known := slices.ContainsFunc(h.tools[req.User], func(t api.Tool) bool { return t.Name == req.Name })
	fn, toolFn := h.callFn, h.x.callTool
	h.mu.Unlock()
	switch {
	case !known:
		return nil, fmt.Errorf("tool %q for user %q: %w", req.Name, req.User, ext.ErrNotFound)
	case toolFn != nil:
		return toolFn(ctx, req)
	case fn != nil:
		return fn(ctx, req.User, req.Name, req.Arguments)
	}
	return Echo(req.User, req.Name, req.Arguments), nil
}

// Echo is the default answer to a call.
func Echo(user, name string, args json.RawMessage) *ext.CallToolResult {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	res := ext.TextResult(user + " " + name + " " + string(args))
	res.StructuredContent, _ = json.Marshal(map[string]any{"user": user, "tool": name, "args": args})
	return res
}

// Subscribe returns a channel that receives a value (coalesced) whenever
// the user's tools change (user "": anyone's), until cancel is called or
// ctx ends.
func (h *Host) Subscribe(ctx context.Context, user string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs[user] == nil {
		h.subs[user] = map[chan struct{}]struct{}{}
	}
	h.subs[user][ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	unsub := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.subs[user], ch)
			if len(h.subs[user]) == 0 {
				delete(h.subs, user)
			}
		})
	}
	stop := context.AfterFunc(ctx, unsub)
	return ch, func() {
		stop()
		unsub()
	}
}

// Sections returns the sections of the options.
func (h *Host) Sections(context.Context) ([]api.Section, error) {
	return slices.Clone(h.opts.Sections), nil
}

func (h *Host) form(extension, section string) (settings.Form, error) {
	for _, s := range h.opts.Sections {
		if s.Extension == extension && s.ID == section {
			return settings.ParseForm(s.Form)
		}
	}
	return settings.Form{}, fmt.Errorf("extension %q has no settings section %q: %w", extension, section, ext.ErrNotFound)
}

func (h *Host) known(extension string) error {
	if slices.ContainsFunc(h.opts.Sections, func(s api.Section) bool { return s.Extension == extension }) ||
		slices.ContainsFunc(h.opts.Extensions, func(e api.ExtensionInfo) bool { return e.Name == extension }) {
		return nil
	}
	return fmt.Errorf("extension %q: %w", extension, ext.ErrNotFound)
}

// GetSettings returns a user's values of a section ({} when none) and
// which of its secret fields are set.
func (h *Host) GetSettings(_ context.Context, user, extension, section string) (*api.SettingsValues, error) {
	f, err := h.form(extension, section)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := &api.SettingsValues{Values: h.values[key(user, extension, section)]}
	if out.Values == nil {
		out.Values = json.RawMessage("{}")
	}
	if names := settings.SecretNames(f); len(names) > 0 {
		out.Secrets = map[string]bool{}
		for _, n := range names {
			_, out.Secrets[n] = h.secrets[key(user, extension, n)]
		}
	}
	return out, nil
}

// PatchSettings merges a JSON Merge Patch into the stored values (as
// host.Host does) and stores the result as SetSettings does.
func (h *Host) PatchSettings(ctx context.Context, user, extension, section string, patch json.RawMessage) error {
	h.mu.Lock()
	cur := h.values[key(user, extension, section)]
	h.mu.Unlock()
	if len(cur) == 0 {
		cur = json.RawMessage("{}")
	}
	merged, err := jsonpatch.MergePatch(cur, patch)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	return h.SetSettings(ctx, user, extension, section, merged)
}

// SetSettings validates values against the section's form (package
// settings: bad values are settings.FieldErrors wrapping
// ext.ErrInvalidArgument, and nothing is stored), stores them and their
// secret fields (a string sets, null clears, absent keeps), and refreshes
// the user.
func (h *Host) SetSettings(ctx context.Context, user, extension, section string, values json.RawMessage) error {
	f, err := h.form(extension, section)
	if err != nil {
		return err
	}
	plain, secrets, err := settings.SplitSecrets(f, values)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	norm, err := settings.ValidateValues(f, plain)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	h.mu.Lock()
	h.log = append(h.log, strings.Join([]string{"SetSettings", user, extension, section}, " "))
	h.values[key(user, extension, section)] = norm
	for n, v := range secrets {
		if v == nil {
			delete(h.secrets, key(user, extension, n))
		} else {
			h.secrets[key(user, extension, n)] = *v
		}
	}
	h.mu.Unlock()
	return h.Refresh(ctx, user)
}

// checkSecretName refuses what a secrets store refuses.
func checkSecretName(name string) error {
	if name == "" || strings.ContainsAny(name, " \n/") {
		return fmt.Errorf("secret name %q is not valid: %w", name, ext.ErrInvalidArgument)
	}
	return nil
}

// SetSecret stores one secret of a user (or of api.OperatorUser) and
// refreshes the user.
func (h *Host) SetSecret(ctx context.Context, user, extension, name, value string) error {
	if err := h.known(extension); err != nil {
		return err
	}
	if err := checkSecretName(name); err != nil {
		return err
	}
	h.mu.Lock()
	h.log = append(h.log, strings.Join([]string{"SetSecret", user, extension, name}, " "))
	h.secrets[key(user, extension, name)] = value
	h.mu.Unlock()
	return h.Refresh(ctx, user)
}

// DeleteSecret removes one secret ([ext.ErrNotFound] when it is not set)
// and refreshes the user.
func (h *Host) DeleteSecret(ctx context.Context, user, extension, name string) error {
	if err := h.known(extension); err != nil {
		return err
	}
	h.mu.Lock()
	k := key(user, extension, name)
	if _, ok := h.secrets[k]; !ok {
		h.mu.Unlock()
		return fmt.Errorf("secret %q: %w", name, ext.ErrNotFound)
	}
	h.log = append(h.log, strings.Join([]string{"DeleteSecret", user, extension, name}, " "))
	delete(h.secrets, k)
	h.mu.Unlock()
	return h.Refresh(ctx, user)
}

// SecretNames lists a user's secret names for an extension, sorted.
func (h *Host) SecretNames(_ context.Context, user, extension string) ([]string, error) {
	if err := h.known(extension); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	prefix := key(user, extension, "")
	for k := range h.secrets {
		if n, ok := strings.CutPrefix(k, prefix); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Status returns the user's status lines as set (activating the user), or
// every user's when user is "".
func (h *Host) Status(ctx context.Context, user string) ([]api.StatusEntry, error) {
	if user != "" {
		if err := h.ensureActive(ctx, user); err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if user != "" {
		return slices.Clone(h.status[user]), nil
	}
	users := make([]string, 0, len(h.status))
	for u := range h.status {
		users = append(users, u)
	}
	sort.Strings(users)
	var out []api.StatusEntry
	for _, u := range users {
		out = append(out, h.status[u]...)
	}
	return out, nil
}

// Extensions returns the extensions of the options.
func (h *Host) Extensions(context.Context) ([]api.ExtensionInfo, error) {
	return slices.Clone(h.opts.Extensions), nil
}

// Overview returns the overview of the options.
func (h *Host) Overview(context.Context) (api.Overview, error) { return h.opts.Overview, nil }
