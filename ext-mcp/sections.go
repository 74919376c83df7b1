package extmcp

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/invopop/jsonschema"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/settings"
)

// JSONSchemaExtend adds to the generated schema what the Go types cannot
// say: server names follow a pattern.
func (ServerList) JSONSchemaExtend(s *jsonschema.Schema) {
	for _, key := range []string{"mcpServers", "servers"} {
		if p, ok := s.Properties.Get(key); ok && p != nil {
			p.PropertyNames = &jsonschema.Schema{Pattern: catalog.ServerNamePattern}
		}
	}
}

// JSONSchemaExtend adds to the generated schema that a server has either a
// command or a url.
func (Server) JSONSchemaExtend(s *jsonschema.Schema) {
	s.OneOf = []*jsonschema.Schema{{Required: []string{"command"}}, {Required: []string{"url"}}}
}

var (
	schemaOnce sync.Once
	schemaRaw  json.RawMessage
	schemaErr  error
)

// ServerListSchema returns the JSON Schema of a server list ([ServerList]),
// generated with invopop/jsonschema. The "Your MCP servers" editor checks
// the user's JSON against it; [ParseServerList] is the full validator.
func ServerListSchema() (json.RawMessage, error) {
	schemaOnce.Do(func() { schemaRaw, schemaErr = settings.SchemaOf[ServerList]() })
	return schemaRaw, schemaErr
}

// httpsOnly is the pattern of a user's server URL when the operator does
// not allow plain http (userServerAllowHTTP): https, or http to loopback,
// which is no clear-text risk (netguard.CheckURL). The address is not
// checked here: the dial refuses loopback, private and link-local ones
// unless userServerAllowCIDRs opens them (guard.go).
const httpsOnly = `^(https://|http://(localhost|127\.[0-9.]+|\[::1\])([:/?#]|$))`

// userListSchema is [ServerListSchema] for the users' own lists: without
// userServerAllowHTTP, a url must be https (or http to loopback), so the
// settings page refuses a plain http URL next to the field.
func userListSchema(allowHTTP bool) (json.RawMessage, error) {
	raw, err := ServerListSchema()
	if err != nil || allowHTTP {
		return raw, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	props, _ := doc["properties"].(map[string]any)
	for _, key := range []string{"mcpServers", "servers"} {
		list, _ := props[key].(map[string]any)
		server, _ := list["additionalProperties"].(map[string]any)
		fields, _ := server["properties"].(map[string]any)
		u, ok := fields["url"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("the server list schema has no %s url", key)
		}
		u["pattern"] = httpsOnly
		u["description"] = "Endpoint of a remote server: https (plain http would send your token across the network in clear text). " +
			"This machine (localhost), private and link-local addresses are refused unless the operator opened them."
	}
	return json.Marshal(doc)
}

// sharedWarning is shown on the switch of every shared server.
const sharedWarning = "A shared server hands every permitted user's agent the operator's credential for this service: " +
	"what your agent does with it is done in the operator's name."

// buildSections returns the settings sections for cfg: "MCP servers"
// always, "Your MCP servers" when the policy is not none.
func buildSections(cfg *Config) ([]ext.SettingsSection, error) {
	var nodes []*settings.Node
	cfg.each(func(name string, s Server) {
		if s.Enabled != nil && !*s.Enabled {
			return
		}
		label := name
		shared := s.Credentials == catalog.CredentialsShared
		// The host shows the user's status of the server beside its switch.
		toggle := settings.Toggle(name, label).WithDefault(s.Availability != catalog.AvailabilityOptIn && !shared).WithStatus(name)
		if shared {
			// One form serves every user: the switch is off for all, and
			// switching it on is refused to those it is not lent to.
			help := "Shared server, lent by the operator to some users only: off until you switch it on; switching it on is refused if it is not lent to you."
			if s.SharedAuthority != "" {
				help = "Shared server (" + s.SharedAuthority + "), lent by the operator to some users only: off until you switch it on; switching it on is refused if it is not lent to you."
			}
			nodes = append(nodes, toggle.WithHelp(help).WithWarning(sharedWarning))
			return
		}
		if s.Availability == catalog.AvailabilityOptIn {
			toggle.WithHelp("Off until you switch it on.")
		}
		nodes = append(nodes, toggle)
		if takesToken(s) {
			nodes = append(nodes, settings.Secret(TokenSecret(name), "Your token for "+name).WithHelp(tokenHelp(s)))
		}
	})
	servers := settings.Section{
		ID: SectionServers, Title: "MCP servers", Scope: settings.ScopeUser,
		Description: "The MCP servers your agent may use, and your tokens for them.",
		Form:        settings.NewForm(nodes...),
	}
	sections := []settings.Section{servers}
	if catalog.AllowsUserServers(cfg.UserServers) {
		schema, err := userListSchema(cfg.UserServerAllowHTTP)
		if err != nil {
			return nil, fmt.Errorf("extmcp: generating the server list schema: %w", err)
		}
		allowed := "remote servers (url)"
		if catalog.AllowsUserCommands(cfg.UserServers) {
			allowed = "remote servers (url) and local programs (command)"
		}
		if !cfg.UserServerAllowHTTP {
			allowed += "; a url must be https"
		}
		// The dial refuses what the guard refuses (guard.go): this machine
		// included, whatever the scheme.
		if len(cfg.UserServerAllowCIDRs) == 0 {
			allowed += "; a url may not point at this machine (localhost, 127.0.0.1), a private network or a link-local address"
		} else {
			allowed += "; a url may point at this machine (localhost), a private network or a link-local address only within " +
				strings.Join(cfg.UserServerAllowCIDRs, ", ")
		}
		help := fmt.Sprintf(`Paste a {"mcpServers": {...}} list, as Claude Desktop or VS Code reads it. The operator allows %s. `+
			`Their tools are named u_<name>/<tool>. Store a server's token as the secret token:u_<name>; an Authorization header written here is not sent.`, allowed)
		if len(cfg.Catalog) > 0 {
			help += " The servers of the operator's catalog are added in their own sections (Add …), beside this list."
		}
		sections = append(sections, settings.Section{
			ID: SectionUserServers, Title: "Your MCP servers", Scope: settings.ScopeUser,
			Description: "MCP servers of your own, beside the operator's.",
			Form: settings.NewForm(settings.JSONEditor(UserServersField, "Your MCP servers", schema).
				WithHelp(help).WithPlaceholder(UserServersExample)),
		})
	}
	sections = append(sections, catalogSections(cfg)...)
	out := make([]ext.SettingsSection, 0, len(sections))
	for _, s := range sections {
		form, err := s.MarshalForm()
		if err != nil {
			return nil, fmt.Errorf("extmcp: building settings: %w", err)
		}
		out = append(out, ext.SettingsSection{ID: s.ID, Title: s.Title, Description: s.Description,
			Scope: string(s.Scope), Form: form})
	}
	return out, nil
}

// UserServersExample is the example the "Your MCP servers" editor shows
// while it is empty: a list that the users' policy "url" accepts.
const UserServersExample = `{
  "mcpServers": {
    "docs": { "url": "https://mcp.example.com/mcp" }
  }
}`

// takesToken reports whether a personal server of the operator's reads a
// user's token, which the "MCP servers" form then asks for: a stdio
// server (MCP_ACCESS_TOKEN), or a remote one for which the operator wrote
// an Authorization header (replaced by the user's token). A remote server
// without one needs no credential or signs the user in with OAuth (its
// status then says "needs sign-in", with Connect); a plain token for it
// can still be stored as token:<server>.
func takesToken(s Server) bool {
	if s.Command != "" {
		return true
	}
	for k := range s.Headers {
		if strings.EqualFold(k, "Authorization") {
			return true
		}
	}
	return false
}

func tokenHelp(s Server) string {
	if s.URL != "" {
		return "Sent as Authorization: Bearer <token>. Without one, the server is called without credentials."
	}
	return "Passed to the server as MCP_ACCESS_TOKEN. Without one, the server runs without credentials."
}
