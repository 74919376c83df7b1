package host

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/yosida95/uritemplate/v3"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// Prompt is a registered prompt and the extension that owns it.
type Prompt = api.Prompt

// Resource is a registered resource and the extension that owns it.
type Resource = api.Resource

// ResourceTemplate is a registered resource template and its extension.
type ResourceTemplate = api.ResourceTemplate

// Instruction is a usage note for models and the extension it came from.
type Instruction = api.Instruction

// extras holds what extensions publish per user beside tools: prompts,
// resources, resource templates and instructions. A prompt name or a
// resource URI taken by two extensions is refused loudly, like tool names.
// Every change raises a "catalog changed" event for the user.
type extras struct {
	// pub serializes the publications of catalogs (SetUserCatalog, the
	// one caller of set), so that what conflict found still holds when
	// set runs; it is taken before the registry's lock and mu.
	pub  sync.Mutex
	mu   sync.RWMutex
	user map[string]map[string]*ext.Catalog // user → extension → catalog (tools unused)
	subs map[string]map[chan struct{}]struct{}
}

func newExtras() *extras {
	return &extras{user: map[string]map[string]*ext.Catalog{}, subs: map[string]map[chan struct{}]struct{}{}}
}

func validateExtras(c *ext.Catalog) error {
	check := uniqueDefs()
	for _, p := range c.Prompts {
		if err := check("prompt", p.Name, p.Definition); err != nil {
			return err
		}
	}
	for _, r := range c.Resources {
		if err := check("resource", r.URI, r.Definition); err != nil {
			return err
		}
	}
	for _, t := range c.ResourceTemplates {
		if err := check("resource template", t.URITemplate, t.Definition); err != nil {
			return err
		}
	}
	return nil
}

// uniqueDefs returns a check that each registration of a kind has a
// non-empty key listed once, and a definition that is valid JSON.
func uniqueDefs() func(kind, key string, def json.RawMessage) error {
	seen := map[string]bool{}
	return func(kind, key string, def json.RawMessage) error {
		if key == "" || seen[kind+"\x00"+key] {
			return fmt.Errorf("%s %q is empty or listed twice: %w", kind, key, ext.ErrInvalidArgument)
		}
		seen[kind+"\x00"+key] = true
		if len(def) > 0 && !json.Valid(def) {
			return fmt.Errorf("%s %q: definition is not valid JSON: %w", kind, key, ext.ErrInvalidArgument)
		}
		return nil
	}
}

// conflict reports a prompt or resource of c that another extension
// already has for user.
func (x *extras) conflict(extName, user string, c *ext.Catalog) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.conflictLocked(extName, user, c)
}

func (x *extras) conflictLocked(extName, user string, c *ext.Catalog) error {
	for other, oc := range x.user[user] {
		if other == extName {
			continue
		}
		for _, p := range c.Prompts {
			if slices.ContainsFunc(oc.Prompts, func(q ext.Prompt) bool { return q.Name == p.Name }) {
				return fmt.Errorf("prompt %q is already registered by extension %q: %w", p.Name, other, ext.ErrInvalidArgument)
			}
		}
		for _, r := range c.Resources {
			if slices.ContainsFunc(oc.Resources, func(q ext.Resource) bool { return q.URI == r.URI }) {
				return fmt.Errorf("resource %q is already registered by extension %q: %w", r.URI, other, ext.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// set replaces extName's extras for user.
func (x *extras) set(extName, user string, c *ext.Catalog) error {
	if c == nil {
		c = &ext.Catalog{}
	}
	if err := validateExtras(c); err != nil {
		return err
	}
	x.mu.Lock()
	if err := x.conflictLocked(extName, user, c); err != nil {
		x.mu.Unlock()
		return err
	}
	cp := &ext.Catalog{
		Prompts: slices.Clone(c.Prompts), Resources: slices.Clone(c.Resources),
		ResourceTemplates: slices.Clone(c.ResourceTemplates), Instructions: slices.Clone(c.Instructions),
	}
	old := x.user[user][extName]
	if old != nil && extrasEqual(old, cp) {
		x.mu.Unlock()
		return nil
	}
	empty := len(cp.Prompts)+len(cp.Resources)+len(cp.ResourceTemplates)+len(cp.Instructions) == 0
	switch {
	case empty && x.user[user] != nil:
		delete(x.user[user], extName)
		if len(x.user[user]) == 0 {
			delete(x.user, user)
		}
	case !empty:
		if x.user[user] == nil {
			x.user[user] = map[string]*ext.Catalog{}
		}
		x.user[user][extName] = cp
	}
	chans := make([]chan struct{}, 0, len(x.subs[user]))
	for ch := range x.subs[user] {
		chans = append(chans, ch)
	}
	x.mu.Unlock()
	if old != nil || !empty {
		notify(chans)
	}
	return nil
}

func extrasEqual(a, b *ext.Catalog) bool {
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return string(ab) == string(bb)
}

func (x *extras) prompts(user string) []Prompt {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []Prompt
	for e, c := range x.user[user] {
		for _, p := range c.Prompts {
			out = append(out, Prompt{Prompt: p, Extension: e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (x *extras) resources(user string) ([]Resource, []ResourceTemplate) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var (
		rs []Resource
		ts []ResourceTemplate
	)
	for e, c := range x.user[user] {
		for _, r := range c.Resources {
			rs = append(rs, Resource{Resource: r, Extension: e})
		}
		for _, t := range c.ResourceTemplates {
			ts = append(ts, ResourceTemplate{ResourceTemplate: t, Extension: e})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].URI < rs[j].URI })
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].URITemplate != ts[j].URITemplate {
			return ts[i].URITemplate < ts[j].URITemplate
		}
		return ts[i].Extension < ts[j].Extension
	})
	return rs, ts
}

func (x *extras) instructions(user string) []Instruction {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []Instruction
	for e, c := range x.user[user] {
		for _, in := range c.Instructions {
			out = append(out, Instruction{Instruction: in, Extension: e})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Extension != out[j].Extension {
			return out[i].Extension < out[j].Extension
		}
		return out[i].Source < out[j].Source
	})
	return out
}

// promptOwner returns the extension that published prompt name for user.
func (x *extras) promptOwner(user, name string) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for e, c := range x.user[user] {
		for _, p := range c.Prompts {
			if p.Name == name {
				return e
			}
		}
	}
	return ""
}

// resourceOwners returns the extension that published uri for user, or
// else the extensions (in name order) with templates that may serve it.
func (x *extras) resourceOwners(user, uri string) (exact string, templated []string) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for e, c := range x.user[user] {
		for _, r := range c.Resources {
			if r.URI == uri {
				return e, nil
			}
		}
		if len(c.ResourceTemplates) > 0 {
			templated = append(templated, e)
		}
	}
	sort.Strings(templated)
	return "", templated
}

// resourceInScope reports whether scope reaches uri among user's
// resources: a resource listed by a server of the scope, or a URI that
// matches a template of a server of the scope and no template of another
// server (an ambiguous URI is refused: its read might reach the other).
func (x *extras) resourceInScope(user, uri string, scope *ext.Scope) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	in, out := false, false
	for _, c := range x.user[user] {
		for _, r := range c.Resources {
			if r.URI == uri {
				return scope.AllowsServer(r.Server)
			}
		}
		for _, t := range c.ResourceTemplates {
			if !templateMatches(t.URITemplate, uri) {
				continue
			}
			if scope.AllowsServer(t.Server) {
				in = true
			} else {
				out = true
			}
		}
	}
	return in && !out
}

// templateMatches reports whether uri is an expansion of the RFC 6570
// template tmpl.
func templateMatches(tmpl, uri string) bool {
	t, err := uritemplate.New(tmpl)
	if err != nil {
		return false
	}
	return t.Regexp().MatchString(uri)
}

// templateOwner returns the extension that published the template (or
// resource) uri for user.
func (x *extras) templateOwner(user, uri string) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for e, c := range x.user[user] {
		for _, t := range c.ResourceTemplates {
			if t.URITemplate == uri {
				return e
			}
		}
		for _, r := range c.Resources {
			if r.URI == uri {
				return e
			}
		}
	}
	return ""
}

func (x *extras) subscribe(user string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	x.mu.Lock()
	if x.subs[user] == nil {
		x.subs[user] = map[chan struct{}]struct{}{}
	}
	x.subs[user][ch] = struct{}{}
	x.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			x.mu.Lock()
			defer x.mu.Unlock()
			delete(x.subs[user], ch)
			if len(x.subs[user]) == 0 {
				delete(x.subs, user)
			}
		})
	}
}
