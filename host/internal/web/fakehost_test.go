package web

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/settings"
)

// The shared in-memory host serves the web UI.
var _ Host = (*hosttest.Host)(nil)

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

// newFakeHost returns the shared in-memory host with an "mcp" extension
// whose tools and status follow the "MCP servers" toggles the way ext-mcp
// derives them (so that a test sees a switch turn tools off), and a "demo"
// extension with a form of every kind; the notes and search switches name
// their status entries, team's does not; a "hello" extension keeps no
// secret.
func newFakeHost() *hosttest.Host {
	servers := settings.Section{ID: "servers", Title: "MCP servers", Scope: settings.ScopeUser,
		Form: settings.NewForm(
			settings.Toggle("notes", "notes").WithDefault(true).WithStatus("notes"),
			settings.Secret("token:notes", "Your token for notes").WithHelp("Passed to the server as MCP_ACCESS_TOKEN."),
			settings.Toggle("search", "search").WithDefault(false).WithHelp("Off until you switch it on.").WithStatus("search"),
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
	// greeting is a section of an extension that keeps no secret.
	greeting := settings.Section{ID: "greeting", Title: "Greeting", Scope: settings.ScopeUser,
		Form: settings.NewForm(settings.Text("greeting", "Greeting"))}
	admin := settings.Section{ID: "admin", Title: "Operator only", Scope: settings.ScopeSystem,
		Form: settings.NewForm(settings.Text("motd", "Message of the day"))}
	exts := []api.ExtensionInfo{
		{Name: "demo", State: "running", InProcess: true},
		{Name: "mcp", Version: "0.1.0", State: "running", Restarts: 1, PID: 4242, Path: "bin/agenthost-ext-mcp"},
	}
	opts := &hosttest.Options{
		Extensions: exts,
		Overview: api.Overview{Version: "v9.9.9-test", Started: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Uptime: "1h0m0s",
			ActiveUsers: 2, ServiceProcesses: 3, SecretsBackend: "memory"},
		Activate: activateFake,
	}
	for _, s := range []struct {
		ext string
		sec settings.Section
	}{{"mcp", servers}, {"mcp", userServers}, {"demo", prefs}, {"demo", admin}, {"hello", greeting}} {
		opts.Sections = append(opts.Sections, api.Section{Extension: s.ext, ID: s.sec.ID, Title: s.sec.Title,
			Description: s.sec.Description, Scope: string(s.sec.Scope), Form: mustForm(s.sec)})
	}
	return hosttest.New(opts)
}

// activateFake derives the user's tools and status from their "MCP
// servers" toggles, as ext-mcp would: a server switched on is connected
// with its tools (search is quarantined), one switched off is retiring.
// The demo extension gives every user a deferred tool naming them.
func activateFake(_ context.Context, h *hosttest.Host, user string) error {
	on := map[string]bool{"notes": true, "search": false, "team": true}
	var set map[string]bool
	_ = json.Unmarshal([]byte(h.Stored(user, "mcp", "servers")), &set)
	maps.Copy(on, set)
	var (
		tools  []api.Tool
		status []api.StatusEntry
	)
	for server, on := range on {
		e := api.StatusEntry{Extension: "mcp", User: user, Name: server, State: "connected", Tools: len(fakeServers[server])}
		switch {
		case !on:
			e.State, e.Tools = "retiring", 0
		case server == "search":
			e.State, e.Reason, e.Tools = "quarantined", "connecting to search: connection refused ("+user+")", 0
			e.NextRetry = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		status = append(status, e)
		if !on {
			continue
		}
		for _, t := range fakeServers[server] {
			tl := api.Tool{Extension: "mcp", Tool: ext.Tool{Name: server + "/" + t,
				Description: fmt.Sprintf("MCP tool %s on server %s.", t, server)}}
			if t == "ask" {
				tl.OutputSchema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}}}`)
				tl.Annotations = json.RawMessage(`{"readOnlyHint":true}`)
			}
			tools = append(tools, tl)
		}
	}
	tools = append(tools, api.Tool{Extension: "demo", Tool: ext.Tool{Name: "demo/hidden_gem", Exposure: ext.ExposureDeferred,
		Description: "Only for " + user + "."}})
	sort.Slice(status, func(i, j int) bool { return status[i].Name < status[j].Name })
	h.SetTools(user, tools...)
	h.SetStatus(user, status...)
	return nil
}
