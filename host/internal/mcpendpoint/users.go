package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/host/internal/api"
)

// refreshTimeout bounds one reload of a user's tools or catalog after a
// change.
const refreshTimeout = 60 * time.Second

var errClosed = errors.New("mcpendpoint: closed")

// entry is one of a user's tools as the endpoint offers it. Entries are
// immutable and shared by every session of the user; a rebuilt table
// reuses the entry of a tool that did not change, so sessions can tell
// changes by pointer.
type entry struct {
	original string // the host's name, e.g. "github/create_issue"
	name     string // the MCP name, e.g. "github__create_issue"
	exposure ext.Exposure
	src      api.Tool
	tool     *mcp.Tool // go-sdk's form (stateless revision); nil for codemode tools
	json     []byte    // the MCP definition as listed; nil for codemode tools
	search   string    // lowercase text that search_tools matches
	// paramHeaders: its input schema names x-mcp-header, so that go-sdk
	// checks Mcp-Param-* headers of its calls (the fast path leaves those
	// to it).
	paramHeaders bool
}

// toolTable is a user's tools at one moment: the reverse map from MCP
// names to the host's, and the lists sessions show.
type toolTable struct {
	byName     map[string]*entry // by MCP name, every exposure
	byOriginal map[string]*entry
	entries    []*entry   // sorted by MCP name
	deferred   []*entry   // sorted by MCP name
	codeOnly   []*entry   // codemode tools search_tools finds, when the user has code/run (sorted)
	base       []*entry   // the direct tools, listed to every session, sorted
	list       []listItem // base and search_tools (when there are deferred tools), sorted
}

// viewWith is what a session that found the deferred tools found lists
// (search_tools aside), sorted by name.
func (t *toolTable) viewWith(found map[string]bool) []*entry {
	out := slices.Clone(t.base)
	for _, ent := range t.deferred {
		if found[ent.original] {
			out = append(out, ent)
		}
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	return out
}

// listWith is the list of a session that found some deferred tools.
func (t *toolTable) listWith(found map[string]bool) []listItem {
	view := t.viewWith(found)
	out := make([]listItem, 0, len(view)+1)
	for _, ent := range view {
		out = append(out, listItem{ent.name, ent.json})
	}
	if t.searchable() {
		out = append(out, listItem{searchToolName, searchToolJSON})
	}
	slices.SortFunc(out, func(a, b listItem) int { return strings.Compare(a.key, b.key) })
	return out
}

// codeRunTool is code mode's tool (ext-codemode): with it, search_tools
// also finds the user's codemode tools, for scripts to call, when
// code/run's description could not hold their declarations.
const codeRunTool = "code/run"

// searchable reports whether the user has tools search_tools finds.
func (t *toolTable) searchable() bool { return len(t.deferred) > 0 || len(t.codeOnly) > 0 }

// promptEntry is one of a user's prompts: its MCP name and definition.
type promptEntry struct {
	original, name string
	json           []byte
}

// catalogView is a user's prompts, resources, templates and instructions
// at one moment, as sessions list them.
type catalogView struct {
	prompts      []listItem // sorted by MCP name
	promptByName map[string]*promptEntry
	resources    []listItem // sorted by URI
	templates    []listItem // sorted by URI template
	instructions string     // the extensions', merged
	src          catalogSource
}

// catalogSource is what the host gave, for the stateless server.
type catalogSource struct {
	prompts   []*promptEntry
	resources []api.Resource
	templates []api.ResourceTemplate
}

// userState holds a user's tables while the user has sessions (or a
// request that may open one, or a stateless lease), and the goroutine that
// refreshes them.
type userState struct {
	user     string
	scope    *ext.Scope            // the view's scope (a scoped token's); nil: everything
	key      string                // its key in Endpoint.users: viewKey(user, scope)
	refs     int                   // guarded by Endpoint.mu
	sessions map[*session]struct{} // open sessions; guarded by Endpoint.mu
	lease    time.Time             // a stateless request's hold ends then; guarded by Endpoint.mu
	ready    chan struct{}         // closed when the first load ended
	err      error                 // of the first load; set before ready closes
	stop     chan struct{}         // closed (under Endpoint.mu) to end the refresh loop
	done     bool                  // stop is closed; guarded by Endpoint.mu

	table atomic.Pointer[toolTable]   // read lock-free on the call path
	cat   atomic.Pointer[catalogView] // read lock-free

	mu  sync.Mutex // serializes table writes; guards the sessions' views and sdk
	sdk *sdkServer // the stateless revision's server, built on first use

	fastMeta atomic.Pointer[fastMeta] // the last _meta the stateless fast path took
}

func (u *userState) stopLocked() {
	if !u.done {
		u.done = true
		close(u.stop)
	}
}

// viewKey names a user's view: the user's whole tables, or those a
// scope reaches. Every session and stateless request of one token scope
// shares one view.
func viewKey(user string, scope *ext.Scope) string {
	if scope == nil {
		return user
	}
	return user + "\x00" + scope.Key()
}

// acquire returns the state of the user's view (everything, or what
// scope reaches) with its tables loaded, holding a reference that the
// caller releases. The first caller loads; concurrent ones wait for it.
func (e *Endpoint) acquire(ctx context.Context, user string, scope *ext.Scope) (*userState, error) {
	key := viewKey(user, scope)
	e.mu.Lock()
	if e.closing.Load() {
		e.mu.Unlock()
		return nil, errClosed
	}
	u := e.users[key]
	first := u == nil
	if first {
		u = &userState{user: user, scope: scope, key: key, ready: make(chan struct{}), stop: make(chan struct{}), sessions: map[*session]struct{}{}}
		e.users[key] = u
		if e.views[user] == nil {
			e.views[user] = map[*userState]struct{}{}
		}
		e.views[user][u] = struct{}{}
	}
	u.refs++
	e.mu.Unlock()

	if first {
		u.err = e.load(ctx, u)
		if u.err != nil {
			// A failed load is not cached: the next request tries again.
			e.mu.Lock()
			if e.users[key] == u {
				delete(e.users, key)
			}
			e.forgetView(u)
			e.mu.Unlock()
		}
		close(u.ready)
	} else {
		select {
		case <-u.ready:
		case <-ctx.Done():
			e.release(u)
			return nil, ctx.Err()
		}
	}
	if u.err != nil {
		e.release(u)
		return nil, u.err
	}
	return u, nil
}

// release drops a reference; the last one forgets the user and stops its
// refresh loop.
func (e *Endpoint) release(u *userState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u.refs--
	if u.refs == 0 {
		if e.users[u.key] == u {
			delete(e.users, u.key)
		}
		e.forgetView(u)
		u.stopLocked()
	}
}

// forgetView drops u from its user's views. e.mu must be held.
func (e *Endpoint) forgetView(u *userState) {
	if vs := e.views[u.user]; vs != nil {
		delete(vs, u)
		if len(vs) == 0 {
			delete(e.views, u.user)
		}
	}
}

// load subscribes to the user's changes, then lists the tools and the
// catalog (in that order, so no change is missed), and starts the refresh
// loop. Only the tools must load: a catalog that fails is empty until the
// next change.
func (e *Endpoint) load(ctx context.Context, u *userState) error {
	events, cancel := e.host.Subscribe(e.ctx, u.user)
	catEvents, catCancel := e.host.SubscribeCatalog(u.user)
	stop := func() {
		cancel()
		catCancel()
	}
	tools, err := e.host.Tools(ctx, u.user)
	if err != nil {
		stop()
		return fmt.Errorf("listing the tools of user %q: %w", u.user, err)
	}
	u.table.Store(e.buildTable(u.user, inScope(tools, u.scope), nil))
	u.cat.Store(e.loadCatalog(ctx, u.user, u.scope))
	e.mu.Lock()
	if e.closing.Load() {
		e.mu.Unlock()
		stop()
		return errClosed
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go e.refreshLoop(u, events, catEvents, stop)
	return nil
}

// refreshLoop reloads the user's tools or catalog on every change the
// host reports (the host coalesces bursts) and tells the user's sessions.
func (e *Endpoint) refreshLoop(u *userState, events, catEvents <-chan struct{}, stop func()) {
	defer e.wg.Done()
	defer stop()
	for {
		select {
		case <-u.stop:
			return
		case <-e.ctx.Done():
			return
		case <-events:
			e.refreshTools(u)
		case <-catEvents:
			e.refreshCatalog(u)
		}
	}
}

// sessionsOf returns the user's open sessions.
func (e *Endpoint) sessionsOf(u *userState) []*session {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*session, 0, len(u.sessions))
	for s := range u.sessions {
		out = append(out, s)
	}
	return out
}

var (
	toolsChanged     = mcpwire.NotificationMsg("notifications/tools/list_changed", nil)
	promptsChanged   = mcpwire.NotificationMsg("notifications/prompts/list_changed", nil)
	resourcesChanged = mcpwire.NotificationMsg("notifications/resources/list_changed", nil)
)

func (e *Endpoint) refreshTools(u *userState) {
	ctx, cancel := context.WithTimeout(e.ctx, refreshTimeout)
	defer cancel()
	tools, err := e.host.Tools(ctx, u.user)
	if err != nil {
		// The sessions keep the last list; the next change retries.
		e.log.Warn("mcp: reloading a user's tools", "user", u.user, "err", err)
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old := u.table.Load()
	t := e.buildTable(u.user, inScope(tools, u.scope), old)
	u.table.Store(t)
	baseChanged := !slices.Equal(old.base, t.base) || old.searchable() != t.searchable()
	for _, s := range e.sessionsOf(u) {
		changed := baseChanged
		if len(s.found) > 0 {
			v := t.viewWith(s.found)
			changed = changed || !slices.Equal(v, s.view)
			s.view = v
		}
		if changed {
			_ = s.push(toolsChanged) // a client without a stream lists again anyway
		}
	}
	if u.sdk != nil {
		u.sdk.syncTools(t)
	}
}

func (e *Endpoint) refreshCatalog(u *userState) {
	ctx, cancel := context.WithTimeout(e.ctx, refreshTimeout)
	defer cancel()
	c := e.loadCatalog(ctx, u.user, u.scope)
	u.mu.Lock()
	defer u.mu.Unlock()
	old := u.cat.Load()
	u.cat.Store(c)
	prompts := !sameItems(old.prompts, c.prompts)
	resources := !sameItems(old.resources, c.resources) || !sameItems(old.templates, c.templates)
	if prompts || resources {
		for _, s := range e.sessionsOf(u) {
			if prompts {
				_ = s.push(promptsChanged)
			}
			if resources {
				_ = s.push(resourcesChanged)
			}
		}
	}
	if u.sdk != nil {
		u.sdk.syncCatalog(c)
	}
}

func sameItems(a, b []listItem) bool {
	return slices.EqualFunc(a, b, func(x, y listItem) bool { return x.key == y.key && bytes.Equal(x.json, y.json) })
}

// inScope returns the tools scope reaches (all of them for nil), as
// scope sees them: a tool with a scoped description
// ([ext.MetaScopedDescription], code mode's code/run) is in when its parts
// name a tool in scope, with the description of those parts only; the
// parts' key is removed from every view's listing.
func inScope(tools []api.Tool, scope *ext.Scope) []api.Tool {
	out := make([]api.Tool, 0, len(tools))
	for _, t := range tools {
		t2, d := ext.SplitScopedDescription(t.Tool)
		switch {
		case d == nil:
			if scope.AllowsTool(t.Name) {
				out = append(out, t)
			}
		case scope == nil:
			t.Tool = t2
			out = append(out, t)
		default:
			if desc, ok := d.Render(scope); ok {
				t2.Description = desc
				t.Tool = t2
				out = append(out, t)
			}
		}
	}
	return out
}

// loadCatalog lists the user's prompts, resources, templates and
// instructions (those of the scope's servers only, when scope is set); a
// part that fails is left empty and logged.
func (e *Endpoint) loadCatalog(ctx context.Context, user string, scope *ext.Scope) *catalogView {
	c := &catalogView{promptByName: map[string]*promptEntry{}}
	prompts, err := e.host.Prompts(ctx, user)
	if err != nil {
		e.log.Warn("mcp: listing a user's prompts", "user", user, "err", err)
	}
	if scope != nil {
		prompts = slices.DeleteFunc(slices.Clone(prompts), func(p api.Prompt) bool { return !scope.AllowsPrompt(p.Name) })
	}
	originals := make([]string, 0, len(prompts))
	for _, p := range prompts {
		originals = append(originals, p.Name)
	}
	names := mapNames(originals, e.sep)
	for _, p := range prompts {
		def, err := withName(p.Definition, names[p.Name])
		if err != nil {
			e.log.Warn("mcp: leaving out a prompt with a bad definition", "user", user, "prompt", p.Name, "err", err)
			continue
		}
		pe := &promptEntry{original: p.Name, name: names[p.Name], json: def}
		if c.promptByName[pe.name] != nil {
			continue
		}
		c.promptByName[pe.name] = pe
		c.prompts = append(c.prompts, listItem{pe.name, pe.json})
		c.src.prompts = append(c.src.prompts, pe)
	}
	slices.SortFunc(c.prompts, func(a, b listItem) int { return strings.Compare(a.key, b.key) })
	resources, templates, err := e.host.Resources(ctx, user)
	if err != nil {
		e.log.Warn("mcp: listing a user's resources", "user", user, "err", err)
	}
	if scope != nil {
		resources = slices.DeleteFunc(slices.Clone(resources), func(r api.Resource) bool { return !scope.AllowsServer(r.Server) })
		templates = slices.DeleteFunc(slices.Clone(templates), func(t api.ResourceTemplate) bool { return !scope.AllowsServer(t.Server) })
	}
	for _, r := range resources {
		def := r.Definition
		if len(bytes.TrimSpace(def)) == 0 {
			def, _ = json.Marshal(map[string]string{"uri": r.URI, "name": r.URI})
		} else if !json.Valid(def) {
			continue
		}
		c.resources = append(c.resources, listItem{r.URI, compact(def)})
		c.src.resources = append(c.src.resources, r)
	}
	for _, t := range templates {
		def := t.Definition
		if len(bytes.TrimSpace(def)) == 0 {
			def, _ = json.Marshal(map[string]string{"uriTemplate": t.URITemplate, "name": t.URITemplate})
		} else if !json.Valid(def) {
			continue
		}
		c.templates = append(c.templates, listItem{t.URITemplate, compact(def)})
		c.src.templates = append(c.src.templates, t)
	}
	slices.SortStableFunc(c.resources, func(a, b listItem) int { return strings.Compare(a.key, b.key) })
	slices.SortStableFunc(c.templates, func(a, b listItem) int { return strings.Compare(a.key, b.key) })
	ins, err := e.host.Instructions(ctx, user)
	if err != nil {
		e.log.Warn("mcp: reading a user's instructions", "user", user, "err", err)
	}
	if scope != nil {
		// A source is a server (ext-mcp's); another extension's source
		// names no server of the scope and is left out.
		ins = slices.DeleteFunc(slices.Clone(ins), func(in api.Instruction) bool { return !scope.AllowsServer(in.Source) })
	}
	c.instructions = mergeInstructions(ins)
	return c
}

// compact returns b without insignificant whitespace (b is valid JSON).
func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// withName returns an MCP object definition (a JSON object, or empty) with
// its "name" set to name.
func withName(def json.RawMessage, name string) ([]byte, error) {
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(def)) > 0 {
		if err := json.Unmarshal(def, &m); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
	}
	m["name"], _ = json.Marshal(name)
	return json.Marshal(m)
}

// The bounds of the instructions sent at initialize: each source's text
// is cut at maxSourceInstructions bytes, and sources that would take the
// whole past maxInstructions are left out (and counted).
const (
	maxSourceInstructions = 4 << 10
	maxInstructions       = 16 << 10
)

// mergeInstructions merges the extensions' instructions: one paragraph
// per source, in the host's order (by extension, then source), each
// prefixed with its source's name in brackets, within the bounds above.
func mergeInstructions(list []api.Instruction) string {
	var b strings.Builder
	left := 0
	for _, in := range list {
		text := strings.TrimSpace(in.Text)
		if text == "" {
			continue
		}
		src := in.Source
		if src == "" {
			src = in.Extension
		}
		src = clip(strings.Map(func(r rune) rune {
			if r < ' ' || r == '[' || r == ']' {
				return '_'
			}
			return r
		}, src), 64)
		text = clipUTF8(text, maxSourceInstructions)
		para := "[" + src + "] " + text
		if b.Len()+len(para)+2 > maxInstructions {
			left++
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(para)
	}
	if left > 0 {
		fmt.Fprintf(&b, "\n\n(The instructions of %d more sources were left out: they would pass %d bytes.)", left, maxInstructions)
	}
	return b.String()
}

// clipUTF8 cuts s to at most n bytes on a rune boundary, marking the cut.
func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// searchNote tells models of search_tools.
const searchNote = "More tools are available than are listed: call search_tools with keywords to find them. " +
	"Tools it finds join your tool list and can be called by name."

// instructionsFor is what a new session of u is told at initialize.
func instructionsFor(u *userState) string {
	var parts []string
	if u.table.Load().searchable() {
		parts = append(parts, searchNote)
	}
	if in := u.cat.Load().instructions; in != "" {
		parts = append(parts, in)
	}
	return strings.Join(parts, "\n\n")
}

// buildTable maps the user's tools to MCP names and builds their MCP
// definitions, reusing prev's entries for tools that did not change. A
// tool whose definition go-sdk would refuse is left out and logged.
func (e *Endpoint) buildTable(user string, tools []api.Tool, prev *toolTable) *toolTable {
	originals := make([]string, 0, len(tools))
	seen := make(map[string]bool, len(tools))
	kept := tools[:0:0]
	for _, t := range tools {
		if seen[t.Name] {
			e.log.Warn("mcp: a tool name appears twice; keeping the first", "user", user, "tool", t.Name)
			continue
		}
		seen[t.Name] = true
		originals = append(originals, t.Name)
		kept = append(kept, t)
	}
	names := mapNames(originals, e.sep)
	t := &toolTable{byName: make(map[string]*entry, len(kept)), byOriginal: make(map[string]*entry, len(kept))}
	for _, src := range kept {
		name := names[src.Name]
		var ent *entry
		if prev != nil {
			if old := prev.byOriginal[src.Name]; old != nil && old.name == name && sameTool(old.src, src) {
				ent = old
			}
		}
		if ent == nil {
			var err error
			if ent, err = e.newEntry(name, src); err != nil {
				e.log.Warn("mcp: leaving out a tool go-sdk refuses", "user", user, "tool", src.Name, "err", err)
				continue
			}
		}
		t.byName[ent.name] = ent
		t.byOriginal[ent.original] = ent
		t.entries = append(t.entries, ent)
		switch ent.exposure {
		case ext.ExposureDeferred:
			t.deferred = append(t.deferred, ent)
		case ext.ExposureCodemode:
			t.codeOnly = append(t.codeOnly, ent)
		case ext.ExposureDirect:
			t.base = append(t.base, ent)
		}
	}
	byName := func(a, b *entry) int { return strings.Compare(a.name, b.name) }
	slices.SortFunc(t.entries, byName)
	slices.SortFunc(t.deferred, byName)
	if run, ok := t.byOriginal[codeRunTool]; ok && run.exposure != ext.ExposureCodemode {
		slices.SortFunc(t.codeOnly, byName)
	} else {
		t.codeOnly = nil
	}
	slices.SortFunc(t.base, byName)
	t.list = make([]listItem, 0, len(t.base)+1)
	for _, ent := range t.base {
		t.list = append(t.list, listItem{ent.name, ent.json})
	}
	if t.searchable() {
		t.list = append(t.list, listItem{searchToolName, searchToolJSON})
		slices.SortFunc(t.list, func(a, b listItem) int { return strings.Compare(a.key, b.key) })
	}
	return t
}

// sameTool reports whether two registrations would be offered alike.
func sameTool(a, b api.Tool) bool {
	return a.Name == b.Name && a.Title == b.Title && a.Description == b.Description &&
		a.Exposure == b.Exposure && a.Extension == b.Extension &&
		bytes.Equal(a.InputSchema, b.InputSchema) && bytes.Equal(a.OutputSchema, b.OutputSchema) &&
		bytes.Equal(a.Annotations, b.Annotations) && bytes.Equal(a.Execution, b.Execution) &&
		bytes.Equal(a.Icons, b.Icons) && bytes.Equal(a.Meta, b.Meta)
}

// defaultSchema stands in for a missing input schema.
var defaultSchema = json.RawMessage(`{"type":"object"}`)

// present reports whether a raw field holds a value.
func present(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && string(b) != "null"
}

// newEntry builds the MCP definition of one tool (schemas, annotations,
// execution and icons as raw JSON, sent as they came; _meta with the
// host's name under "agenthost/name") and checks it the way go-sdk's
// AddTool does.
func (e *Endpoint) newEntry(name string, src api.Tool) (*entry, error) {
	ent := &entry{original: src.Name, name: name, exposure: src.Exposure, src: src}
	switch ent.exposure {
	case "":
		ent.exposure = ext.ExposureDirect
	case ext.ExposureDirect, ext.ExposureDeferred, ext.ExposureCodemode:
	default:
		return nil, fmt.Errorf("unknown exposure %q", src.Exposure)
	}
	ent.search = strings.ToLower(src.Name + " " + name + " " + src.Title + " " + src.Description)
	if ent.exposure == ext.ExposureCodemode {
		return ent, nil
	}
	in := src.InputSchema
	if !present(in) {
		in = defaultSchema
	}
	var schema any
	if json.Unmarshal(in, &schema) == nil {
		norm, _ := json.Marshal(schema) // escapes resolved
		ent.paramHeaders = bytes.Contains(norm, []byte(`"x-mcp-header"`))
	} else {
		ent.paramHeaders = true
	}
	meta := map[string]json.RawMessage{}
	if present(src.Meta) {
		if err := json.Unmarshal(src.Meta, &meta); err != nil {
			return nil, fmt.Errorf("decoding _meta: %w", err)
		}
	}
	meta["agenthost/name"], _ = json.Marshal(src.Name)
	metaJSON, _ := json.Marshal(meta)
	tool := &mcp.Tool{
		Name:        name,
		Title:       src.Title,
		Description: src.Description,
		InputSchema: in,
		// Clients show the host's name; the endpoint never reads it back.
		Meta: mcp.Meta{"agenthost/name": src.Name},
	}
	if present(src.OutputSchema) {
		tool.OutputSchema = src.OutputSchema
	}
	if present(src.Annotations) {
		var a mcp.ToolAnnotations
		if err := json.Unmarshal(src.Annotations, &a); err != nil {
			return nil, fmt.Errorf("decoding annotations: %w", err)
		}
		tool.Annotations = &a
	}
	// AddTool panics on a schema it refuses (not an object, bad
	// x-mcp-header annotations); try it once here, on a server no session
	// uses.
	e.scratch.Lock()
	err := addTool(e.scratchServer, tool, nil)
	e.scratchServer.RemoveTools(tool.Name)
	e.scratch.Unlock()
	if err != nil {
		return nil, err
	}
	fields := []struct {
		key string
		raw json.RawMessage
	}{
		{"inputSchema", in}, {"outputSchema", src.OutputSchema}, {"annotations", src.Annotations},
		{"execution", src.Execution}, {"icons", src.Icons}, {"_meta", metaJSON},
	}
	var b bytes.Buffer
	b.WriteString(`{"name":`)
	b.WriteString(quote(name))
	if src.Title != "" {
		b.WriteString(`,"title":` + quote(src.Title))
	}
	if src.Description != "" {
		b.WriteString(`,"description":` + quote(src.Description))
	}
	for _, f := range fields {
		if !present(f.raw) {
			continue
		}
		if !json.Valid(f.raw) {
			return nil, fmt.Errorf("%s is not valid JSON", f.key)
		}
		b.WriteString(`,"` + f.key + `":`)
		b.Write(compact(f.raw))
	}
	b.WriteByte('}')
	ent.tool = tool
	ent.json = b.Bytes()
	return ent, nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// addTool is s.AddTool with its panics (bad schemas from third-party
// servers) turned into errors.
func addTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	s.AddTool(t, h)
	return nil
}
