package host

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"sync"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// Tool is a registered tool and the extension that owns it.
type Tool = api.Tool

// registry holds system tools and per-user tools, keyed by extension. A
// name taken by two extensions is refused loudly. Every change raises a
// "tools changed" event for the users it affects.
type registry struct {
	logger *slog.Logger

	mu     sync.RWMutex
	system map[string][]ext.Tool            // extension → tools
	user   map[string]map[string][]ext.Tool // user → extension → tools
	// The same tools by name, for the call path and collision checks.
	sysIdx  map[string]Tool            // name → tool
	userIdx map[string]map[string]Tool // user → name → tool
	// gone remembers, per user, tools that left the user's list (a server
	// switched off or quarantined) and their extension, so a call with a
	// stale list still reaches the extension, which explains why (for
	// ext-mcp: `MCP server "S" is disabled`) instead of a bare not found.
	gone map[string]map[string]string // user → tool name → extension
	subs map[string]map[chan struct{}]struct{}
	// allSubs hear every change (status pages, all-user surfaces).
	allSubs map[chan struct{}]struct{}
	// asleep are the users deactivated for idleness (or by Deactivate)
	// and not active since: the empty lists their extensions publish as
	// they retire them are not taken, so their tools stay listed, their
	// sessions hear no change, and nothing wakes them but a request.
	asleep map[string]bool

	// pins, when set, checks the tools published for a user against
	// their pins (README "Tool pinning"): it returns the tools to
	// register and the ones held back or flagged. Every list of a user's
	// tools goes through it, so what is held back is neither listed nor
	// found by a call, by any surface.
	pins func(user string, tools []ext.Tool) ([]ext.Tool, map[string]pins.Held)
	// raw are the lists as published, to check again after an approval;
	// gen counts each user's and extension's publications, so a check
	// that a newer publication overtook is dropped.
	raw map[string]map[string][]ext.Tool // user → extension → tools
	gen map[string]map[string]uint64
	// held are the tools pins held back (block) or flagged (warn).
	held map[string]map[string]map[string]pins.Held // user → extension → tool → why
}

func newRegistry(logger *slog.Logger) *registry {
	return &registry{
		logger: logger, system: map[string][]ext.Tool{}, user: map[string]map[string][]ext.Tool{},
		sysIdx: map[string]Tool{}, userIdx: map[string]map[string]Tool{},
		gone: map[string]map[string]string{},
		subs: map[string]map[chan struct{}]struct{}{}, allSubs: map[chan struct{}]struct{}{},
		asleep: map[string]bool{},
		raw:    map[string]map[string][]ext.Tool{}, gen: map[string]map[string]uint64{},
		held: map[string]map[string]map[string]pins.Held{},
	}
}

// sleep marks user as deactivated: until wake, an empty list published
// for them keeps the one they have.
func (r *registry) sleep(user string) {
	r.mu.Lock()
	r.asleep[user] = true
	r.mu.Unlock()
}

// wake ends sleep: user is being activated again.
func (r *registry) wake(user string) {
	r.mu.Lock()
	delete(r.asleep, user)
	r.mu.Unlock()
}

// sleeping reports whether user is asleep.
func (r *registry) sleeping(user string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.asleep[user]
}

func validateTools(tools []ext.Tool) error {
	seen := map[string]bool{}
	for _, t := range tools {
		if t.Name == "" {
			return fmt.Errorf("a tool has an empty name: %w", ext.ErrInvalidArgument)
		}
		if seen[t.Name] {
			return fmt.Errorf("tool %q is listed twice: %w", t.Name, ext.ErrInvalidArgument)
		}
		seen[t.Name] = true
		switch t.Exposure {
		case "", ext.ExposureDirect, ext.ExposureDeferred, ext.ExposureCodemode:
		default:
			return fmt.Errorf("tool %q: unknown exposure %q: %w", t.Name, t.Exposure, ext.ErrInvalidArgument)
		}
		switch t.Replay {
		case "", ext.ReplaySafe, ext.ReplayUnsafe:
		default:
			return fmt.Errorf("tool %q: unknown replay %q: %w", t.Name, t.Replay, ext.ErrInvalidArgument)
		}
		switch t.Pin {
		case "", ext.PinOff, ext.PinWarn, ext.PinBlock:
		default:
			return fmt.Errorf("tool %q: unknown pin mode %q: %w", t.Name, t.Pin, ext.ErrInvalidArgument)
		}
		if len(t.InputSchema) > 0 && !json.Valid(t.InputSchema) {
			return fmt.Errorf("tool %q: input schema is not valid JSON: %w", t.Name, ext.ErrInvalidArgument)
		}
	}
	return nil
}

// normalize fills the defaults of a registration.
func normalize(tools []ext.Tool) []ext.Tool {
	if tools == nil {
		return nil
	}
	out := make([]ext.Tool, len(tools))
	for i, t := range tools {
		out[i] = api.WithDefaults(t)
	}
	return out
}

// ownerLocked returns which extension other than except holds name, for
// user or, with user "", for anyone; "" when none does.
func (r *registry) ownerLocked(name, user, except string) string {
	if t, ok := r.sysIdx[name]; ok && t.Extension != except {
		return t.Extension
	}
	if user != "" {
		if t, ok := r.userIdx[user][name]; ok && t.Extension != except {
			return t.Extension
		}
		return ""
	}
	for _, idx := range r.userIdx {
		if t, ok := idx[name]; ok && t.Extension != except {
			return t.Extension
		}
	}
	return ""
}

// reindexLocked replaces extName's entries in idx: old out, now in.
func reindexLocked(idx map[string]Tool, extName string, old, now []ext.Tool) {
	for _, t := range old {
		delete(idx, t.Name)
	}
	for _, t := range now {
		idx[t.Name] = Tool{Tool: t, Extension: extName}
	}
}

func (r *registry) setSystem(extName string, tools []ext.Tool) error {
	if err := validateTools(tools); err != nil {
		return err
	}
	r.mu.Lock()
	for _, t := range tools {
		if other := r.ownerLocked(t.Name, "", extName); other != "" {
			r.mu.Unlock()
			r.logger.Error("tool name collision refused", "extension", extName, "tool", t.Name, "owner", other)
			return fmt.Errorf("tool %q is already registered by extension %q: %w", t.Name, other, ext.ErrInvalidArgument)
		}
	}
	now := normalize(tools)
	reindexLocked(r.sysIdx, extName, r.system[extName], now)
	r.system[extName] = now
	chans := r.allChansLocked()
	r.mu.Unlock()
	notify(chans)
	return nil
}

func (r *registry) setUser(extName, user string, tools []ext.Tool) error {
	if err := validateTools(tools); err != nil {
		return err
	}
	r.mu.Lock()
	if len(tools) == 0 && r.asleep[user] {
		r.mu.Unlock()
		return nil // retired for idleness: the list stays (see asleep)
	}
	if r.raw[user] == nil {
		r.raw[user], r.gen[user] = map[string][]ext.Tool{}, map[string]uint64{}
	}
	r.gen[user][extName]++
	g := r.gen[user][extName]
	if len(tools) == 0 {
		delete(r.raw[user], extName)
	} else {
		r.raw[user][extName] = tools
	}
	r.mu.Unlock()
	return r.applyUser(extName, user, tools, g)
}

// recheck checks the published lists of user ("" every user) against
// their pins again, after an approval.
func (r *registry) recheck(user string) {
	type pub struct {
		user, ext string
		tools     []ext.Tool
		gen       uint64
	}
	var todo []pub
	r.mu.RLock()
	for u, m := range r.raw {
		if user != "" && u != user {
			continue
		}
		for e, tools := range m {
			todo = append(todo, pub{u, e, tools, r.gen[u][e]})
		}
	}
	r.mu.RUnlock()
	for _, p := range todo {
		if err := r.applyUser(p.ext, p.user, p.tools, p.gen); err != nil {
			r.logger.Warn("registering the tools again after a pin approval failed", "extension", p.ext, "user", p.user, "error", err)
		}
	}
}

// heldTool returns why user's tool name is held back by a pin, if it is.
func (r *registry) heldTool(user, name string) (pins.Held, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, m := range r.held[user] {
		if h, ok := m[name]; ok && h.Mode == ext.PinBlock {
			return h, true
		}
	}
	return pins.Held{}, false
}

// heldTools returns user's tools held back or flagged by a pin.
func (r *registry) heldTools(user string) []pins.Held {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []pins.Held
	for _, m := range r.held[user] {
		for _, h := range m {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	return out
}

// applyUser registers tools, publication g of extName for user, minus
// what its pins hold back.
func (r *registry) applyUser(extName, user string, tools []ext.Tool, g uint64) error {
	var held map[string]pins.Held
	if r.pins != nil {
		tools, held = r.pins(user, tools)
	}
	r.mu.Lock()
	if r.gen[user][extName] != g {
		r.mu.Unlock()
		return nil // a newer list of the same extension came meanwhile
	}
	if len(held) == 0 {
		delete(r.held[user], extName)
		if len(r.held[user]) == 0 {
			delete(r.held, user)
		}
	} else {
		if r.held[user] == nil {
			r.held[user] = map[string]map[string]pins.Held{}
		}
		r.held[user][extName] = held
	}
	for _, t := range tools {
		if other := r.ownerLocked(t.Name, user, extName); other != "" {
			r.mu.Unlock()
			r.logger.Error("tool name collision refused", "extension", extName, "user", user, "tool", t.Name, "owner", other)
			return fmt.Errorf("tool %q is already registered by extension %q: %w", t.Name, other, ext.ErrInvalidArgument)
		}
	}
	if r.user[user] == nil {
		r.user[user] = map[string][]ext.Tool{}
	}
	if r.userIdx[user] == nil {
		r.userIdx[user] = map[string]Tool{}
	}
	old, now := r.user[user][extName], normalize(tools)
	if slices.EqualFunc(old, now, func(a, b ext.Tool) bool { return reflect.DeepEqual(a, b) }) {
		r.mu.Unlock()
		return nil // the same list again (a user woken up): nothing changed
	}
	r.rememberGoneLocked(user, extName, old, now)
	for name := range held {
		delete(r.gone[user], name) // held back: not reached through gone
	}
	reindexLocked(r.userIdx[user], extName, old, now)
	if len(now) == 0 {
		delete(r.user[user], extName)
	} else {
		r.user[user][extName] = now
	}
	if len(r.userIdx[user]) == 0 {
		delete(r.userIdx, user)
	}
	chans := r.userChansLocked(user)
	r.mu.Unlock()
	notify(chans)
	return nil
}

// maxGone bounds the remembered tools per user.
const maxGone = 4096

func (r *registry) rememberGoneLocked(user, extName string, old, now []ext.Tool) {
	g := r.gone[user]
	if g == nil {
		g = map[string]string{}
		r.gone[user] = g
	}
	keep := make(map[string]bool, len(now))
	for _, t := range now {
		keep[t.Name] = true
		delete(g, t.Name)
	}
	for _, t := range old {
		if keep[t.Name] {
			continue
		}
		if len(g) >= maxGone {
			for k := range g {
				delete(g, k)
				break
			}
		}
		g[t.Name] = extName
	}
	if len(g) == 0 {
		delete(r.gone, user)
	}
}

// list returns the user's tools (system and their own), sorted by name.
func (r *registry) list(user string) []Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Tool
	for e, tools := range r.system {
		for _, t := range tools {
			out = append(out, Tool{Tool: t, Extension: e})
		}
	}
	for e, tools := range r.user[user] {
		for _, t := range tools {
			out = append(out, Tool{Tool: t, Extension: e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// lookup finds the tool name for user. A tool a pin holds back is not
// found (see heldTool for why).
func (r *registry) lookup(user, name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, m := range r.held[user] {
		if h, ok := m[name]; ok && h.Mode == ext.PinBlock {
			return Tool{}, false
		}
	}
	if t, ok := r.userIdx[user][name]; ok {
		return t, true
	}
	if t, ok := r.sysIdx[name]; ok {
		return t, true
	}
	if e, ok := r.gone[user][name]; ok {
		return Tool{Tool: ext.Tool{Name: name}, Extension: e}, true
	}
	return Tool{}, false
}

// poke raises a "tools changed" event for user without a change of the
// registry: what the user may see of it changed (the tool policy).
func (r *registry) poke(user string) {
	r.mu.RLock()
	chans := r.userChansLocked(user)
	r.mu.RUnlock()
	notify(chans)
}

// pokeAll tells every subscriber that its tools may have changed (the
// tool policy was reloaded).
func (r *registry) pokeAll() {
	r.mu.RLock()
	chans := r.allChansLocked()
	r.mu.RUnlock()
	notify(chans)
}

// subscribe returns a channel that receives (coalesced) a value whenever
// the user's tools change; "" subscribes to every change.
func (r *registry) subscribe(user string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	if user == "" {
		r.allSubs[ch] = struct{}{}
	} else {
		if r.subs[user] == nil {
			r.subs[user] = map[chan struct{}]struct{}{}
		}
		r.subs[user][ch] = struct{}{}
	}
	r.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if user == "" {
				delete(r.allSubs, ch)
				return
			}
			delete(r.subs[user], ch)
			if len(r.subs[user]) == 0 {
				delete(r.subs, user)
			}
		})
	}
}

func (r *registry) userChansLocked(user string) []chan struct{} {
	out := make([]chan struct{}, 0, len(r.subs[user])+len(r.allSubs))
	for ch := range r.subs[user] {
		out = append(out, ch)
	}
	for ch := range r.allSubs {
		out = append(out, ch)
	}
	return out
}

func (r *registry) allChansLocked() []chan struct{} {
	var out []chan struct{}
	for _, m := range r.subs {
		for ch := range m {
			out = append(out, ch)
		}
	}
	for ch := range r.allSubs {
		out = append(out, ch)
	}
	return out
}

func notify(chans []chan struct{}) {
	for _, ch := range chans {
		select {
		case ch <- struct{}{}:
		default: // one pending event is enough
		}
	}
}
