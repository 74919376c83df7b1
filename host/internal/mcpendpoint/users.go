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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// refreshTimeout bounds one reload of a user's tools after a change.
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
	tool     *mcp.Tool // nil for codemode tools, which are never listed
	search   string    // lowercase text that search_tools matches
}

// toolTable is a user's tools at one moment: the reverse map from MCP
// names to the host's, built when listing.
type toolTable struct {
	byName     map[string]*entry // by MCP name, every exposure
	byOriginal map[string]*entry
	entries    []*entry // sorted by MCP name
	deferred   []*entry
}

// userState holds a user's table while the user has sessions (or a
// request that may open one), and the goroutine that refreshes it.
type userState struct {
	user  string
	refs  int           // guarded by Endpoint.mu
	ready chan struct{} // closed when the first load ended
	err   error         // of the first load; set before ready closes
	stop  chan struct{} // closed (under Endpoint.mu) to end the refresh loop
	done  bool          // stop is closed; guarded by Endpoint.mu

	table atomic.Pointer[toolTable] // read lock-free on the call path

	mu       sync.Mutex // guards sessions and their tool lists; serializes table writes
	sessions map[*session]struct{}
}

func (u *userState) stopLocked() {
	if !u.done {
		u.done = true
		close(u.stop)
	}
}

// acquire returns the user's state with its table loaded, holding a
// reference that the caller releases. The first caller loads; concurrent
// ones wait for it.
func (e *Endpoint) acquire(ctx context.Context, user string) (*userState, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errClosed
	}
	u := e.users[user]
	first := u == nil
	if first {
		u = &userState{user: user, ready: make(chan struct{}), stop: make(chan struct{}), sessions: map[*session]struct{}{}}
		e.users[user] = u
	}
	u.refs++
	e.mu.Unlock()

	if first {
		u.err = e.load(ctx, u)
		if u.err != nil {
			// A failed load is not cached: the next request tries again.
			e.mu.Lock()
			if e.users[user] == u {
				delete(e.users, user)
			}
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
		if e.users[u.user] == u {
			delete(e.users, u.user)
		}
		u.stopLocked()
	}
}

// load subscribes to the user's changes, then lists the tools (in that
// order, so no change is missed), and starts the refresh loop.
func (e *Endpoint) load(ctx context.Context, u *userState) error {
	events, cancel := e.host.Subscribe(e.ctx, u.user)
	tools, err := e.host.Tools(ctx, u.user)
	if err != nil {
		cancel()
		return fmt.Errorf("listing the tools of user %q: %w", u.user, err)
	}
	u.table.Store(e.buildTable(u.user, tools, nil))
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel()
		return errClosed
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go e.refreshLoop(u, events, cancel)
	return nil
}

// refreshLoop reloads the user's tools on every change the host reports
// (the host coalesces bursts) and hands them to the user's sessions.
func (e *Endpoint) refreshLoop(u *userState, events <-chan struct{}, cancel func()) {
	defer e.wg.Done()
	defer cancel()
	for {
		select {
		case <-u.stop:
			return
		case <-e.ctx.Done():
			return
		case <-events:
			e.refresh(u)
		}
	}
}

func (e *Endpoint) refresh(u *userState) {
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
	t := e.buildTable(u.user, tools, u.table.Load())
	u.table.Store(t)
	for s := range u.sessions {
		s.syncLocked(t)
	}
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
		if ent.exposure == ext.ExposureDeferred {
			t.deferred = append(t.deferred, ent)
		}
	}
	slices.SortFunc(t.entries, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	slices.SortFunc(t.deferred, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	return t
}

// sameTool reports whether two registrations would be offered alike.
func sameTool(a, b api.Tool) bool {
	return a.Name == b.Name && a.Title == b.Title && a.Description == b.Description &&
		a.Exposure == b.Exposure && a.Extension == b.Extension &&
		bytes.Equal(a.InputSchema, b.InputSchema) && bytes.Equal(a.OutputSchema, b.OutputSchema) &&
		bytes.Equal(a.Annotations, b.Annotations)
}

// defaultSchema stands in for a missing input schema.
var defaultSchema = json.RawMessage(`{"type":"object"}`)

// newEntry builds the MCP definition of one tool, with the schemas as raw
// JSON (sent as they came), and checks it the way go-sdk's AddTool does.
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
	if len(bytes.TrimSpace(in)) == 0 {
		in = defaultSchema
	}
	tool := &mcp.Tool{
		Name:        name,
		Title:       src.Title,
		Description: src.Description,
		InputSchema: in,
		// Clients show the host's name; the endpoint never reads it back.
		Meta: mcp.Meta{"agenthost/name": src.Name},
	}
	if len(bytes.TrimSpace(src.OutputSchema)) > 0 {
		tool.OutputSchema = src.OutputSchema
	}
	if len(bytes.TrimSpace(src.Annotations)) > 0 {
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
	ent.tool = tool
	return ent, nil
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
