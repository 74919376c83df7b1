package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/settings"
)

// fakeHost is an in-memory api.Host: the real settings validation of
// package settings, per-user values and secrets in maps, and tools and
// status derived from the "MCP servers" toggles the way ext-mcp derives
// them, so that a test sees a switch turn tools off.
type fakeHost struct {
	sections []api.Section

	mu       sync.Mutex
	values   map[string]json.RawMessage // user/ext/section
	secrets  map[string]string          // user/ext/name
	extraBad map[string][]api.StatusEntry
	calls    []string // "SetSettings alice mcp servers", for assertions
}

var _ api.Host = (*fakeHost)(nil)

// userServersSchema is a small JSON Schema in the shape of ext-mcp's
// server list.
const userServersSchema = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "mcpServers": {
      "type": "object",
      "additionalProperties": {
        "type": "object",
        "additionalProperties": false,
        "properties": {"url": {"type": "string"}, "command": {"type": "string"}, "headers": {"type": "object"}}
      }
    }
  }
}`

// sharedWarning mirrors ext-mcp's warning on shared servers.
const sharedWarning = "A shared server hands every permitted user's agent the operator's credential for this service."

// fakeServers are the operator's servers of the fake "mcp" extension and
// the tools each has.
var fakeServers = map[string][]string{"notes": {"add_note", "list_notes"}, "search": {"query"}, "team": {"ask"}}

func mustForm(s settings.Section) json.RawMessage {
	b, err := s.MarshalForm()
	if err != nil {
		panic(err)
	}
	return b
}

func newFakeHost() *fakeHost {
	servers := settings.Section{ID: "servers", Title: "MCP servers", Scope: settings.ScopeUser,
		Form: settings.NewForm(
			settings.Toggle("notes", "notes").WithDefault(true),
			settings.Secret("token:notes", "Your token for notes").WithHelp("Passed to the server as MCP_ACCESS_TOKEN."),
			settings.Toggle("search", "search").WithDefault(false).WithHelp("Off until you switch it on."),
			settings.Secret("token:search", "Your token for search"),
			settings.Toggle("team", "team").WithDefault(true).WithHelp("Shared server: the team's service account").WithWarning(sharedWarning),
		)}
	userServers := settings.Section{ID: "user-servers", Title: "Your MCP servers", Scope: settings.ScopeUser,
		Description: "MCP servers of your own, beside the operator's.",
		Form: settings.NewForm(settings.JSONEditor("servers", "Your MCP servers", json.RawMessage(userServersSchema)).
			WithHelp(`Paste a {"mcpServers": {...}} list.`))}
	prefs := settings.Section{ID: "prefs", Title: "Preferences", Scope: settings.ScopeUser,
		Form: settings.NewForm(
			settings.Text("nickname", "Nickname").WithPlaceholder("how the agent calls you").WithMaxLength(40),
			settings.LongText("notes", "Notes"),
			settings.Select("mode", "Mode", settings.Option{Value: "fast", Label: "Fast"}, settings.Option{Value: "careful"}).WithDefault("fast"),
			settings.Number("retries", "Retries").WithRange(0, 10).WithInteger().WithDefault(3),
			settings.Group("advanced", "Advanced",
				settings.Toggle("verbose", "Verbose logs"),
				settings.Number("ratio", "Ratio").WithStep(0.5),
				settings.Secret("apikey", "API key"),
			),
		)}
	admin := settings.Section{ID: "admin", Title: "Operator only", Scope: settings.ScopeSystem,
		Form: settings.NewForm(settings.Text("motd", "Message of the day"))}
	h := &fakeHost{values: map[string]json.RawMessage{}, secrets: map[string]string{}, extraBad: map[string][]api.StatusEntry{}}
	for _, s := range []struct {
		ext string
		sec settings.Section
	}{{"mcp", servers}, {"mcp", userServers}, {"demo", prefs}, {"demo", admin}} {
		h.sections = append(h.sections, api.Section{Extension: s.ext, ID: s.sec.ID, Title: s.sec.Title,
			Description: s.sec.Description, Scope: string(s.sec.Scope), Form: mustForm(s.sec)})
	}
	return h
}

func (h *fakeHost) form(extName, section string) (settings.Form, error) {
	for _, s := range h.sections {
		if s.Extension == extName && s.ID == section {
			return settings.ParseForm(s.Form)
		}
	}
	return settings.Form{}, fmt.Errorf("extension %q has no settings section %q: %w", extName, section, ext.ErrNotFound)
}

func (h *fakeHost) hasExt(name string) bool {
	return slices.ContainsFunc(h.sections, func(s api.Section) bool { return s.Extension == name })
}

// toggles returns the user's "MCP servers" switches with their defaults.
func (h *fakeHost) toggles(user string) map[string]bool {
	h.mu.Lock()
	raw := h.values[user+"/mcp/servers"]
	h.mu.Unlock()
	on := map[string]bool{"notes": true, "search": false, "team": true}
	var set map[string]bool
	_ = json.Unmarshal(raw, &set)
	maps.Copy(on, set)
	return on
}

func (h *fakeHost) Tools(ctx context.Context, user string) ([]api.Tool, error) {
	var out []api.Tool
	for server, on := range h.toggles(user) {
		if !on {
			continue
		}
		for _, t := range fakeServers[server] {
			out = append(out, api.Tool{Extension: "mcp", Tool: ext.Tool{Name: server + "/" + t,
				Description: fmt.Sprintf("MCP tool %s on server %s.", t, server), Exposure: ext.ExposureDirect}})
		}
	}
	out = append(out, api.Tool{Extension: "demo", Tool: ext.Tool{Name: "demo/hidden_gem", Exposure: ext.ExposureDeferred,
		Description: "Only for " + user + "."}})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (h *fakeHost) Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error) {
	return nil, ext.ErrUnimplemented
}

func (h *fakeHost) Subscribe(user string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	return ch, func() {}
}

func (h *fakeHost) Sections() []api.Section { return slices.Clone(h.sections) }

func (h *fakeHost) GetSettings(ctx context.Context, user, extName, section string) (*api.SettingsValues, error) {
	f, err := h.form(extName, section)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := &api.SettingsValues{Values: h.values[user+"/"+extName+"/"+section]}
	if out.Values == nil {
		out.Values = json.RawMessage("{}")
	}
	if names := settings.SecretNames(f); len(names) > 0 {
		out.Secrets = map[string]bool{}
		for _, n := range names {
			_, out.Secrets[n] = h.secrets[user+"/"+extName+"/"+n]
		}
	}
	return out, nil
}

func (h *fakeHost) SetSettings(ctx context.Context, user, extName, section string, values json.RawMessage) error {
	f, err := h.form(extName, section)
	if err != nil {
		return err
	}
	plain, secrets, err := settings.SplitSecrets(f, values)
	if err != nil {
		return errors.Join(err, ext.ErrInvalidArgument)
	}
	norm, err := settings.ValidateValues(f, plain)
	if err != nil {
		return errors.Join(err, ext.ErrInvalidArgument)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, strings.Join([]string{"SetSettings", user, extName, section}, " "))
	h.values[user+"/"+extName+"/"+section] = norm
	for n, v := range secrets {
		if v == nil {
			delete(h.secrets, user+"/"+extName+"/"+n)
		} else {
			h.secrets[user+"/"+extName+"/"+n] = *v
		}
	}
	return nil
}

func (h *fakeHost) SetSecret(ctx context.Context, user, extName, name, value string) error {
	if !h.hasExt(extName) {
		return fmt.Errorf("extension %q: %w", extName, ext.ErrNotFound)
	}
	if strings.ContainsAny(name, " \n/") {
		return fmt.Errorf("secret name %q is not valid: %w", name, ext.ErrInvalidArgument)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.secrets[user+"/"+extName+"/"+name] = value
	return nil
}

func (h *fakeHost) DeleteSecret(ctx context.Context, user, extName, name string) error {
	if !h.hasExt(extName) {
		return fmt.Errorf("extension %q: %w", extName, ext.ErrNotFound)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := user + "/" + extName + "/" + name
	if _, ok := h.secrets[k]; !ok {
		return fmt.Errorf("secret %q: %w", name, ext.ErrNotFound)
	}
	delete(h.secrets, k)
	return nil
}

func (h *fakeHost) SecretNames(ctx context.Context, user, extName string) ([]string, error) {
	if !h.hasExt(extName) {
		return nil, fmt.Errorf("extension %q: %w", extName, ext.ErrNotFound)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	prefix := user + "/" + extName + "/"
	for k := range h.secrets {
		if n, ok := strings.CutPrefix(k, prefix); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (h *fakeHost) secret(user, extName, name string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.secrets[user+"/"+extName+"/"+name]
	return v, ok
}

func (h *fakeHost) stored(user, extName, section string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.values[user+"/"+extName+"/"+section])
}

// Status reports the user's servers; with leak set for a user it also
// returns another user's line, as a misbehaving extension might.
func (h *fakeHost) Status(ctx context.Context, user string) ([]api.StatusEntry, error) {
	var out []api.StatusEntry
	for server, on := range h.toggles(user) {
		e := api.StatusEntry{Extension: "mcp", User: user, Name: server, State: "connected", Tools: len(fakeServers[server])}
		if !on {
			e.State, e.Tools = "retiring", 0
		}
		if server == "search" && on {
			e.State, e.Reason, e.Tools = "quarantined", "connecting to search: connection refused ("+user+")", 0
			e.NextRetry = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		out = append(out, e)
	}
	h.mu.Lock()
	out = append(out, h.extraBad[user]...)
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (h *fakeHost) Extensions() []api.ExtensionInfo {
	return []api.ExtensionInfo{
		{Name: "demo", State: "running", InProcess: true},
		{Name: "mcp", Version: "0.1.0", State: "running", Restarts: 1, PID: 4242, Path: "bin/agenthost-ext-mcp"},
	}
}

func (h *fakeHost) Overview() api.Overview {
	return api.Overview{Version: "v9.9.9-test", Started: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Uptime: "1h0m0s",
		Extensions: h.Extensions(), ActiveUsers: 2, ServiceProcesses: 3, SecretsBackend: "memory"}
}
