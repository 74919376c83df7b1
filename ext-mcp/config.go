package extmcp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/invopop/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
	"github.com/agenthost/agenthost/ext/netguard"
)

// Config is the extension's config block in the operator's file.
//
// Servers may be listed under "mcpServers" (the shape Claude Desktop,
// Claude Code, pi and mcphost read) or under "servers" (VS Code's), or
// both; a name may appear only once across the two.
type Config struct {
	// UserServers is the policy for the users' own servers: "none" (the
	// default), "url" (remote servers) or "all" (stdio servers too).
	UserServers string `json:"userServers,omitempty" jsonschema:"enum=none,enum=url,enum=all,default=none" jsonschema_description:"Which servers of their own users may add: none, url (remote) or all (stdio too)."`
	// UserServerAllowCIDRs lists the address prefixes (or single
	// addresses) the users' own remote servers may reach although they
	// are refused by default: loopback, private, link-local, CGNAT,
	// multicast and reserved ranges (see package netguard); the OAuth
	// requests of every server, the operator's included, may reach them
	// too (see guard.go).
	UserServerAllowCIDRs []string `json:"userServerAllowCIDRs,omitempty" jsonschema_description:"Address prefixes such as 10.20.0.0/16 the users' own servers may reach although private, loopback or link-local."`
	// UserServerAllowHTTP lets the users' own servers use plain http to a
	// host that is not loopback (their tokens would cross the network in
	// clear text).
	UserServerAllowHTTP bool `json:"userServerAllowHTTP,omitempty" jsonschema_description:"Let the users' own servers use plain http beyond loopback (tokens in clear text)."`
	// MaxResultBytes bounds every message a server sends (a tool, prompt
	// or resource result; a list), unless the server's own maxResultBytes
	// says otherwise. Zero means [DefaultMaxResultBytes].
	MaxResultBytes int64 `json:"maxResultBytes,omitempty" jsonschema_description:"The largest message (a tool, prompt or resource result) a server may send, in bytes; default 4 MiB."`
	// Sandbox runs the operator's stdio servers in the host's sandbox too
	// (a server's own sandbox field overrides it). The users' own stdio
	// servers always run in it.
	Sandbox bool `json:"sandbox,omitempty" jsonschema_description:"Run the operator's stdio servers in the host's sandbox too (the users' own always are)."`
	// Catalog is the operator's catalog of servers users may add to their
	// own by filling a form (usercatalog.go).
	Catalog map[string]CatalogEntry `json:"catalog,omitempty" jsonschema_description:"Servers users may add to their own by filling in their inputs (shaped after the MCP registry's server.json)."`
	// Pin is the default pin mode of every server without its own (the
	// operator's and the users' own): off (the default), warn or block
	// (README "Tool pinning").
	Pin ext.PinMode `json:"pin,omitempty" jsonschema:"enum=off,enum=warn,enum=block" jsonschema_description:"Default tool pinning of every server without its own pin: off, warn (flag changed tools) or block (hold them until approved)."`
	ServerList
}

// DefaultMaxResultBytes is the default bound on one message from a server
// ([Config.MaxResultBytes]).
const DefaultMaxResultBytes = 4 << 20

// The bounds of maxResultBytes.
const (
	minResultBytes = 1 << 10
	maxResultBytes = 1 << 30
)

// ServerList is a list of servers by name, in the operator's file and in a
// user's "Your MCP servers" JSON. Its JSON Schema is [ServerListSchema].
type ServerList struct {
	// MCPServers is the Claude Desktop shape.
	MCPServers map[string]Server `json:"mcpServers,omitempty" jsonschema_description:"Servers by name (Claude Desktop shape). A name matches ^[A-Za-z0-9_-]{1,64}$."`
	// Servers is VS Code's shape; same fields.
	Servers map[string]Server `json:"servers,omitempty" jsonschema_description:"Servers by name (VS Code shape). A name matches ^[A-Za-z0-9_-]{1,64}$."`
}

// Server is one server: stdio (Command) or remote (URL), never both.
type Server struct {
	// Command starts a stdio server (one process per user).
	Command string `json:"command,omitempty" jsonschema_description:"The program of a stdio server; the host starts one process per user."`
	// Args are the command's arguments. Here and in Env, Cwd and Headers,
	// ${user} and ${userDir} are replaced per user (placeholders.go).
	Args []string `json:"args,omitempty" jsonschema_description:"Arguments of the command. ${user} (the user's id) and ${userDir} (their own folder, the process's HOME) are replaced per user; $${ is a literal ${."`
	// Env adds to the process's environment. MCP_ACCESS_TOKEN is dropped
	// for personal servers: the user's token is passed instead.
	Env map[string]string `json:"env,omitempty" jsonschema_description:"Environment of the process. MCP_ACCESS_TOKEN is set from the user's token, never from here, on personal servers. ${user} and ${userDir} are replaced per user."`
	// Cwd is the process's working directory (default: the user's data
	// folder).
	Cwd string `json:"cwd,omitempty" jsonschema_description:"Working directory of the process (default: the user's own folder, ${userDir})."`
	// URL is a remote server's endpoint.
	URL string `json:"url,omitempty" jsonschema:"format=uri" jsonschema_description:"Endpoint of a remote server (http or https)."`
	// Headers are sent with every request. Authorization (any spelling) is
	// replaced by the user's token on personal servers.
	Headers map[string]string `json:"headers,omitempty" jsonschema_description:"HTTP headers for a remote server. Authorization is replaced by the user's token on personal servers. ${user} is replaced by the user's id."`
	// Type is "http" (Streamable HTTP, the default) or "sse" for a remote
	// server, "stdio" (or empty) for a command.
	Type string `json:"type,omitempty" jsonschema:"enum=http,enum=sse,enum=stdio" jsonschema_description:"Transport: http (Streamable HTTP) or sse for a url, stdio for a command."`
	// Credentials is "user" (each user's own token, the default) or
	// "shared" (the operator's credential, lent to Users).
	Credentials string `json:"credentials,omitempty" jsonschema:"enum=user,enum=shared" jsonschema_description:"user: each user's own token (default). shared: the operator's credential, lent to the users listed in users."`
	// Availability is "default" (on until switched off) or "opt-in".
	Availability string `json:"availability,omitempty" jsonschema:"enum=default,enum=opt-in" jsonschema_description:"default: on until a user switches it off. opt-in: off until a user switches it on."`
	// Users is the allowlist of a shared server: user IDs, and groups
	// as "group:NAME" (lent to the group's members, as the host's users
	// table has them: the identity provider's groups and the operator's).
	Users []string `json:"users,omitempty" jsonschema_description:"The users a shared server is lent to; group:NAME lends it to a group's members."`
	// SharedAuthority says why the operator lends this credential; users
	// see it next to the server's switch.
	SharedAuthority string `json:"sharedAuthority,omitempty" jsonschema_description:"Why the operator lends this credential (shown to users)."`
	// Timeout is each call's idle limit (default 60s): a call that hears
	// nothing from the server, not even progress, for this long ends with
	// an error result; each progress notification restarts the clock.
	Timeout Duration `json:"timeout,omitempty" jsonschema_description:"Per-call idle limit (progress restarts it): a duration string such as 30s or 2m, or a number of seconds."`
	// MaxDuration bounds a call however much progress it reports (default:
	// no bound beyond Timeout's).
	MaxDuration Duration `json:"maxDuration,omitempty" jsonschema_description:"Hard limit on a call, whatever progress it reports: a duration string or a number of seconds; none by default."`
	// Enabled switches the server off for everyone when false.
	Enabled *bool `json:"enabled,omitempty" jsonschema_description:"false switches the server off for everyone."`
	// Tools sets the exposure per tool name or glob (* and ?): direct (the
	// default), deferred, codemode or hidden.
	Tools map[string]string `json:"tools,omitempty" jsonschema_description:"Exposure per tool name or glob (* and ?): direct, deferred, codemode or hidden."`
	// Sandbox (the operator's stdio servers) runs the server in the host's
	// sandbox: its own uid per user (a root host) or a user namespace, a
	// private pid namespace, no view of the host's data folder; nil takes
	// the config's top-level sandbox.
	Sandbox *bool `json:"sandbox,omitempty" jsonschema_description:"Run this stdio server in the host's sandbox (the operator's servers only; the users' own always are)."`
	// ReadablePaths (the operator's sandboxed servers) are folders or
	// files the server may read besides the system folders and its
	// user's folder; the command and cwd are added to them.
	ReadablePaths []string `json:"readablePaths,omitempty" jsonschema_description:"Absolute paths a sandboxed server may read (the operator's servers only)."`
	// ProtocolVersion pins the MCP protocol version; "latest" lets go-sdk
	// negotiate the newest; empty means DefaultProtocolVersion.
	ProtocolVersion string `json:"protocolVersion,omitempty" jsonschema_description:"MCP protocol version to speak, e.g. 2025-11-25; latest negotiates the newest."`
	// MaxResultBytes bounds every message this server sends (operator's
	// servers only; zero means the config's maxResultBytes).
	MaxResultBytes int64 `json:"maxResultBytes,omitempty" jsonschema_description:"The largest message this server may send, in bytes (the operator's servers only)."`
	// AllowInsecureHTTP lets an operator's server use plain http to a
	// host that is not loopback: the users' tokens cross the network in
	// clear text.
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty" jsonschema_description:"Allow plain http beyond loopback (the operator's servers only; tokens in clear text)."`
	// ShowOutputToUsers (a shared stdio server) shows the users it is lent
	// to why its process failed: its exit status and the last lines of its
	// stderr, with the secrets it was handed redacted. Without it only the
	// operator sees them (agenthost status without --user): the process
	// holds the operator's credential, and its output may tell what the
	// credential reaches.
	ShowOutputToUsers bool `json:"showOutputToUsers,omitempty" jsonschema_description:"Show the users a shared stdio server is lent to its exit status and last stderr lines when it fails (secrets redacted); otherwise only the operator sees them."`
	// Pin pins the server's tool definitions (README "Tool pinning"):
	// off, warn or block; empty takes the config's top-level pin.
	Pin ext.PinMode `json:"pin,omitempty" jsonschema:"enum=off,enum=warn,enum=block" jsonschema_description:"Tool pinning: off, warn (a changed or new tool works and is flagged) or block (it is hidden until approved with agenthost pins approve or on the settings page)."`
	// OAuth tunes the OAuth sign-in of a remote server that asks for one
	// (see [OAuthConfig]); without it, sign-ins discover everything.
	OAuth *OAuthConfig `json:"oauth,omitempty" jsonschema_description:"OAuth sign-in of a remote server: a client registered with its authorization server, and the scopes to ask for. Optional: without it the client is registered on the fly."`
}

// OAuthConfig tunes the OAuth sign-in of one remote server. Every field is
// optional. The authorization server, its endpoints and the client
// registration are otherwise discovered when the server first answers 401:
// a client ID metadata document (the host's), else ClientID, else dynamic
// client registration.
type OAuthConfig struct {
	// ClientID is a client the operator registered with the server's
	// authorization server (used when it does not accept the host's
	// client ID metadata document).
	ClientID string `json:"clientId,omitempty" jsonschema_description:"A client ID the operator registered with the server's authorization server."`
	// ClientSecret names the operator secret holding ClientID's secret,
	// for a confidential client: never the value itself.
	ClientSecret *SecretRef `json:"clientSecret,omitempty" jsonschema_description:"The client's secret, as a reference to an operator secret: {\"secret\": NAME}, stored with agenthost secret set --operator NAME. Never the value itself."`
	// Scopes replaces the scopes the server names with these.
	Scopes []string `json:"scopes,omitempty" jsonschema_description:"The scopes to ask for, instead of the ones the server names."`
	// AllowDefaultEndpoints (the operator's servers only) lets a sign-in
	// go on when the authorization server publishes no metadata (RFC
	// 8414), with the endpoints MCP 2025-03-26 prescribed for that case:
	// /authorize, /token and /register at the authorization server's
	// root (the MCP server's origin when it publishes no RFC 9728
	// metadata either). Off by default: without metadata neither the
	// issuer nor the server's support for PKCE with S256 can be checked
	// (PKCE is sent all the same).
	// Grant is "authorization_code" (the default: a person signs in) or
	// "client_credentials" (a shared server only): the host obtains the
	// server's token itself, at connect and again before it expires, as
	// client ClientID with the operator secret ClientSecret
	// (client_secret_basic, or client_secret_post) or with assertions
	// signed by the private key in the operator secret PrivateKey
	// (private_key_jwt, RFC 7523). No browser, no refresh token.
	Grant string `json:"grant,omitempty" jsonschema:"enum=authorization_code,enum=client_credentials" jsonschema_description:"authorization_code (a person signs in; the default) or client_credentials (a shared server: the host gets the token with the operator's client credentials, no browser)."`
	// PrivateKey names the operator secret holding the PEM private key
	// (RSA, ECDSA or Ed25519; PKCS #8, PKCS #1 or SEC 1) that signs the
	// client assertions of the client credentials grant.
	PrivateKey *SecretRef `json:"privateKey,omitempty" jsonschema_description:"client_credentials with private_key_jwt: the operator secret holding the client's PEM private key, {\"secret\": NAME}."`
	// TokenEndpointAuth is how the client credentials grant authenticates:
	// client_secret_basic (the default with ClientSecret),
	// client_secret_post, or private_key_jwt (the default with
	// PrivateKey).
	TokenEndpointAuth string `json:"tokenEndpointAuth,omitempty" jsonschema:"enum=client_secret_basic,enum=client_secret_post,enum=private_key_jwt" jsonschema_description:"client_credentials: client_secret_basic (default with clientSecret), client_secret_post or private_key_jwt (default with privateKey)."`
	// TokenEndpoint is the client credentials grant's token endpoint;
	// without it, it is found from the server's metadata (RFC 9728, then
	// RFC 8414).
	TokenEndpoint         string `json:"tokenEndpoint,omitempty" jsonschema_description:"client_credentials: the token endpoint, when the server's metadata does not name it."`
	AllowDefaultEndpoints bool   `json:"allowDefaultEndpoints,omitempty" jsonschema_description:"Sign in to a server on the MCP 2025-03-26 authorization rules, which publishes no metadata: /authorize, /token and /register at its root. Its issuer and PKCE support cannot be checked (the operator's servers only)."`
}

// SecretRef names a secret of the operator's store (agenthost secret set
// --operator NAME) instead of holding its value.
type SecretRef struct {
	// Secret is the operator secret's name.
	Secret string `json:"secret" jsonschema_description:"The name of an operator secret (agenthost secret set --operator NAME)."`
}

// Duration is a timeout written as a Go duration string ("30s", "2m") or
// as a number of seconds (30, 0.5).
type Duration time.Duration

// UnmarshalJSON implements [json.Unmarshaler].
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 30s or 2m", clip(s, 20))
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("must be a duration string such as \"30s\" or a number of seconds")
	}
	if f > float64(maxTimeout/time.Second) || f < 0 {
		return fmt.Errorf("%v seconds is out of range", f)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// MarshalJSON implements [json.Marshaler]: a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// JSONSchema describes Duration for invopop/jsonschema: a string or a
// number of seconds.
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
		{Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`},
		{Type: "number", Minimum: json.Number("0")},
	}}
}

// The accepted policies, kinds and values.
const (
	maxTimeout = 24 * time.Hour
	// ProtocolLatest lets go-sdk negotiate the newest protocol version.
	ProtocolLatest = "latest"
)

// DefaultProtocolVersion is the protocol version ext-mcp speaks to a
// server whose config pins none. It was chosen by measurement
// (BenchmarkCall): against go-sdk servers the draft 2026-07-28 protocol
// costs about 40% more per call than 2025-11-25, servers of other SDKs
// mostly speak only 2025-11-25, and keepalive works only on it.
const DefaultProtocolVersion = mcpwire.V20251125

// envName is what a variable name in env may look like.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// dangerousEnv are variables a user's own server may not set: they change
// how any program, not just the server, runs.
var dangerousEnv = regexp.MustCompile(`^(LD_[A-Z_]+|DYLD_[A-Z_]+|NODE_OPTIONS|PYTHONPATH|PYTHONSTARTUP|PATH|HOME|BASH_ENV|ENV|PERL5OPT|RUBYOPT)$`)

// ConfigError lists everything wrong with a config or a server list, each
// problem naming the server and the field. It wraps
// [ext.ErrInvalidArgument]. Values are never quoted where they could hold
// a secret (env and header values).
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0]
	}
	return fmt.Sprintf("%d problems: %s", len(e.Problems), strings.Join(e.Problems, "; "))
}

// Unwrap returns [ext.ErrInvalidArgument].
func (e *ConfigError) Unwrap() error { return ext.ErrInvalidArgument }

type problems []string

func (p *problems) add(where, format string, args ...any) {
	*p = append(*p, where+": "+fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &ConfigError{Problems: p}
}

// ParseConfig parses and validates the operator's config block. An empty
// block is a config with no servers. Every problem is reported, each
// naming the server and the field.
func ParseConfig(raw json.RawMessage) (*Config, error) { return parseConfig(raw, "", false) }

// parseConfig is ParseConfig, with the commands of the stdio servers
// checked too when commands is set (checkCommands; base is the operator's
// file's folder), their problems among the others.
func parseConfig(raw json.RawMessage, base string, commands bool) (*Config, error) {
	var errs problems
	cfg := &Config{}
	if isEmpty(raw) {
		return cfg, nil
	}
	top, ok := object(raw, "config", &errs)
	if !ok {
		return nil, errs.err()
	}
	for _, k := range sortedKeys(top) {
		v := top[k]
		switch k {
		case "userServers":
			if s, ok := str(v, k, &errs); ok {
				if catalog.ValidUserServers(s) {
					cfg.UserServers = s
				} else {
					errs.add(k, "%q is not one of none, url, all", clip(s, 20))
				}
			}
		case "userServerAllowCIDRs":
			if l, ok := strList(v, k, &errs); ok {
				if _, err := netguard.ParsePrefixes(l); err != nil {
					errs.add(k, "%v", err)
				} else {
					cfg.UserServerAllowCIDRs = l
				}
			}
		case "userServerAllowHTTP":
			cfg.UserServerAllowHTTP, _ = boolean(v, k, &errs)
		case "maxResultBytes":
			cfg.MaxResultBytes, _ = byteCount(v, k, &errs)
		case "sandbox":
			cfg.Sandbox, _ = boolean(v, k, &errs)
		case "catalog":
			cfg.Catalog = parseCatalog(v, &errs)
		case "pin":
			cfg.Pin = parsePin(v, k, &errs)
		case "mcpServers", "servers", "$schema":
		default:
			errs.add(k, "unknown field%s", suggest(k, "userServers", "userServerAllowCIDRs", "userServerAllowHTTP",
				"maxResultBytes", "sandbox", "catalog", "pin", "mcpServers", "servers"))
		}
	}
	cfg.checkCatalogPolicy(&errs)
	cfg.ServerList = parseList(top, false, &errs)
	if commands {
		cfg.checkCommands(base, &errs)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// sandboxes reports whether the config runs servers in the host's
// sandbox: the users' own stdio servers (userServers "all"), or the
// operator's with sandbox set.
func (c *Config) sandboxes() bool {
	if c == nil {
		return false
	}
	if catalog.AllowsUserCommands(c.UserServers) {
		return true
	}
	found := false
	c.each(func(_ string, s Server) {
		s = c.withDefaults(s)
		found = found || (s.Sandbox != nil && *s.Sandbox && (s.Enabled == nil || *s.Enabled))
	})
	return found
}

// withDefaults returns an operator's server with the config's defaults
// applied: a stdio server without its own sandbox field takes the top
// level's.
func (c *Config) withDefaults(s Server) Server {
	if s.Command != "" && s.Sandbox == nil && c.Sandbox {
		on := true
		s.Sandbox = &on
	}
	if s.Pin == "" {
		s.Pin = c.Pin
	}
	return s
}

// parsePin parses a pin mode: off, warn or block.
func parsePin(v json.RawMessage, at string, errs *problems) ext.PinMode {
	s, ok := str(v, at, errs)
	if !ok {
		return ""
	}
	switch m := ext.PinMode(s); m {
	case ext.PinOff, ext.PinWarn, ext.PinBlock:
		return m
	}
	errs.add(at, "%q is not one of off, warn, block", clip(s, 20))
	return ""
}

// ParseServerList parses and validates a user's own server list: the
// same shape and validator as the operator's file, without userServers,
// and without the operator-only fields (credentials, availability, users,
// sharedAuthority) and environment variables that change how programs run.
func ParseServerList(raw json.RawMessage) (*ServerList, error) {
	var errs problems
	if isEmpty(raw) {
		return &ServerList{}, nil
	}
	top, ok := object(raw, "your MCP servers", &errs)
	if !ok {
		return nil, errs.err()
	}
	for _, k := range sortedKeys(top) {
		switch k {
		case "mcpServers", "servers", "$schema":
		case "userServers", "sandbox":
			errs.add(k, "is the operator's policy; it does not belong in your list")
		default:
			errs.add(k, "unknown field%s", suggest(k, "mcpServers", "servers"))
		}
	}
	list := parseList(top, true, &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return &list, nil
}

// parseList parses mcpServers and servers of an object.
func parseList(top map[string]json.RawMessage, user bool, errs *problems) ServerList {
	var list ServerList
	seen := map[string]string{}
	for _, key := range []string{"mcpServers", "servers"} {
		raw, ok := top[key]
		if !ok || isNull(raw) {
			continue
		}
		servers, ok := object(raw, key, errs)
		if !ok {
			continue
		}
		out := map[string]Server{}
		for _, name := range sortedKeys(servers) {
			where := key + "." + name
			if err := catalog.CheckServerName(name, user); err != nil {
				errs.add(where, "%s", err)
				continue
			}
			if prev, dup := seen[name]; dup {
				errs.add(where, "the server is also declared as %s", prev)
				continue
			}
			seen[name] = where
			if s, ok := parseServer(servers[name], where, user, errs); ok {
				out[name] = s
			}
		}
		if key == "mcpServers" {
			list.MCPServers = out
		} else {
			list.Servers = out
		}
	}
	return list
}

// parseServer parses and checks one server.
func parseServer(raw json.RawMessage, where string, user bool, errs *problems) (Server, bool) {
	var s Server
	fields, ok := object(raw, where, errs)
	if !ok {
		return s, false
	}
	n := len(*errs)
	known := []string{"command", "args", "env", "cwd", "url", "headers", "type", "credentials", "availability",
		"users", "sharedAuthority", "timeout", "maxDuration", "enabled", "tools", "protocolVersion",
		"maxResultBytes", "allowInsecureHTTP", "oauth", "sandbox", "readablePaths", "showOutputToUsers", "pin"}
	for _, k := range sortedKeys(fields) {
		v, at := fields[k], where+"."+k
		switch k {
		case "command":
			s.Command, _ = str(v, at, errs)
		case "args":
			s.Args, _ = strList(v, at, errs)
		case "env":
			s.Env, _ = strMap(v, at, errs)
		case "cwd":
			s.Cwd, _ = str(v, at, errs)
		case "url":
			s.URL, _ = str(v, at, errs)
		case "headers":
			s.Headers, _ = strMap(v, at, errs)
		case "type":
			s.Type, _ = str(v, at, errs)
		case "credentials":
			s.Credentials, _ = str(v, at, errs)
		case "availability":
			s.Availability, _ = str(v, at, errs)
		case "users":
			s.Users, _ = strList(v, at, errs)
		case "sharedAuthority":
			s.SharedAuthority, _ = str(v, at, errs)
		case "timeout":
			if err := s.Timeout.UnmarshalJSON(v); err != nil {
				errs.add(at, "%v", err)
			}
		case "maxDuration":
			if err := s.MaxDuration.UnmarshalJSON(v); err != nil {
				errs.add(at, "%v", err)
			}
		case "enabled":
			if b, ok := boolean(v, at, errs); ok {
				s.Enabled = &b
			}
		case "maxResultBytes":
			s.MaxResultBytes, _ = byteCount(v, at, errs)
		case "allowInsecureHTTP":
			s.AllowInsecureHTTP, _ = boolean(v, at, errs)
		case "tools":
			s.Tools, _ = strMap(v, at, errs)
		case "protocolVersion":
			s.ProtocolVersion, _ = str(v, at, errs)
		case "oauth":
			s.OAuth = parseOAuth(v, at, user, errs)
		case "sandbox":
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				errs.add(at, "must be true or false")
			} else {
				s.Sandbox = &b
			}
		case "readablePaths":
			s.ReadablePaths, _ = strList(v, at, errs)
		case "showOutputToUsers":
			s.ShowOutputToUsers, _ = boolean(v, at, errs)
		case "pin":
			s.Pin = parsePin(v, at, errs)
		default:
			errs.add(at, "unknown field%s", suggest(k, known...))
		}
	}
	if len(*errs) > n {
		return s, false
	}
	checkServer(&s, where, user, errs)
	return s, len(*errs) == n
}

// checkServer checks the relations between a server's fields.
func checkServer(s *Server, where string, user bool, errs *problems) {
	switch {
	case s.Command != "" && s.URL != "":
		errs.add(where, "has both command and url; a server is either stdio (command) or remote (url)")
	case s.Command == "" && s.URL == "":
		errs.add(where, "has neither command nor url")
	case s.Command != "":
		if s.Type != "" && s.Type != "stdio" {
			errs.add(where+".type", "%q does not go with command; use stdio or leave it out", clip(s.Type, 20))
		}
		if len(s.Headers) > 0 {
			errs.add(where+".headers", "applies to url servers only")
		}
		if s.OAuth != nil {
			errs.add(where+".oauth", "applies to url servers only: a stdio server takes a token (MCP_ACCESS_TOKEN)")
		}
		for _, k := range sortedKeys(s.Env) {
			switch {
			case !envName.MatchString(k):
				errs.add(where+".env", "%q is not a variable name", clip(k, 40))
			case strings.ContainsRune(s.Env[k], 0):
				errs.add(where+".env."+k, "the value holds a NUL byte")
			case user && dangerousEnv.MatchString(k):
				errs.add(where+".env."+k, "your own servers may not set %s", k)
			}
		}
		for i, a := range s.Args {
			if strings.ContainsRune(a, 0) {
				errs.add(fmt.Sprintf("%s.args[%d]", where, i), "holds a NUL byte")
			}
			checkPlaceholders(a, fmt.Sprintf("%s.args[%d]", where, i), false, false, errs)
		}
		for _, k := range sortedKeys(s.Env) {
			checkPlaceholders(s.Env[k], where+".env."+k, false, true, errs)
		}
		checkPlaceholders(s.Cwd, where+".cwd", false, false, errs)
		for i, p := range s.ReadablePaths {
			if !filepath.IsAbs(p) {
				errs.add(fmt.Sprintf("%s.readablePaths[%d]", where, i), "must be an absolute path")
			}
		}
	default:
		if s.Type != "" && s.Type != "http" && s.Type != "sse" {
			errs.add(where+".type", "%q is not one of http, sse", clip(s.Type, 20))
		}
		if s.OAuth != nil && s.Type == "sse" {
			errs.add(where+".oauth", "applies to Streamable HTTP servers only (type http), not to the legacy SSE transport")
		}
		u, err := url.Parse(s.URL)
		switch {
		case err != nil:
			errs.add(where+".url", "is not a URL")
		case u.Scheme != "http" && u.Scheme != "https":
			errs.add(where+".url", "must start with http:// or https://")
		case u.Host == "":
			errs.add(where+".url", "has no host")
		case u.User != nil:
			errs.add(where+".url", "must not hold credentials; use headers or the users' tokens")
		case u.Scheme == "http" && !user && !s.AllowInsecureHTTP && !netguard.IsLoopbackHost(u.Hostname()):
			// A user's own server is checked against the operator's
			// userServerAllowHTTP when it connects.
			errs.add(where+".url", "plain http to %s would send the users' tokens across the network in clear text: use https, or set allowInsecureHTTP: true on this server",
				clip(u.Hostname(), 64))
		}
		for _, k := range sortedKeys(s.Headers) {
			if !validHeaderName(k) {
				errs.add(where+".headers", "%q is not a header name", clip(k, 40))
			} else if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
				errs.add(where+".headers."+k, "the value holds a line break or NUL")
			} else {
				checkPlaceholders(s.Headers[k], where+".headers."+k, true, true, errs)
			}
		}
		if len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != "" {
			errs.add(where, "args, env and cwd apply to command servers only")
		}
		if s.Sandbox != nil || len(s.ReadablePaths) > 0 {
			errs.add(where, "sandbox and readablePaths apply to command servers only")
		}
	}
	if user {
		for k, set := range map[string]bool{"credentials": s.Credentials != "" && s.Credentials != catalog.CredentialsUser,
			"availability": s.Availability != "", "users": s.Users != nil, "sharedAuthority": s.SharedAuthority != ""} {
			if set {
				errs.add(where+"."+k, "is for the operator's servers only; your servers always use your own credentials")
			}
		}
		for k, set := range map[string]bool{"maxResultBytes": s.MaxResultBytes != 0, "allowInsecureHTTP": s.AllowInsecureHTTP,
			"showOutputToUsers": s.ShowOutputToUsers} {
			if set {
				errs.add(where+"."+k, "is for the operator's servers only; the operator sets it for the users' servers")
			}
		}
		if s.Sandbox != nil || s.ReadablePaths != nil {
			errs.add(where, "sandbox and readablePaths are for the operator's servers only; your stdio servers always run in the host's sandbox")
		}
	}
	switch s.Credentials {
	case "", catalog.CredentialsUser:
		if s.clientCredentials() && !user {
			errs.add(where+".oauth.grant", "client_credentials applies to shared servers only (credentials: shared): the token is the operator's")
		}
		if len(s.Users) > 0 && !user {
			errs.add(where+".users", "applies to shared servers only (credentials: shared)")
		}
		if s.SharedAuthority != "" && !user {
			errs.add(where+".sharedAuthority", "applies to shared servers only (credentials: shared)")
		}
		if s.ShowOutputToUsers && !user {
			errs.add(where+".showOutputToUsers", "applies to shared servers only (credentials: shared); users always see why their own processes failed")
		}
	case catalog.CredentialsShared:
		if s.Availability == catalog.AvailabilityDefault {
			errs.add(where+".availability", "a shared server is opt-in: each user it is lent to switches it on, after the warning; leave availability out")
		}
		if len(s.Users) == 0 {
			errs.add(where+".users", "a shared server needs the list of users it is lent to")
		}
		for i, u := range s.Users {
			if g, ok := strings.CutPrefix(u, catalog.GroupPrefix); ok {
				if g == "" || len(g) > 128 || strings.TrimSpace(g) != g || strings.ContainsFunc(g, func(r rune) bool { return r == ',' || !unicode.IsPrint(r) }) {
					errs.add(fmt.Sprintf("%s.users[%d]", where, i), "%q is not a group (want group:NAME, NAME 1-128 printable characters, no comma)", clip(u, 40))
				}
				continue
			}
			if u == "" || u == OperatorUser || strings.Contains(u, ":") {
				errs.add(fmt.Sprintf("%s.users[%d]", where, i), "%q is not a user (a group is written group:NAME)", clip(u, 40))
			}
		}
	default:
		errs.add(where+".credentials", "%q is not one of user, shared", clip(s.Credentials, 20))
	}
	switch s.Availability {
	case "", catalog.AvailabilityDefault, catalog.AvailabilityOptIn:
	default:
		errs.add(where+".availability", "%q is not one of default, opt-in", clip(s.Availability, 20))
	}
	if s.Timeout < 0 || time.Duration(s.Timeout) > maxTimeout {
		errs.add(where+".timeout", "must be between 0 and %v", maxTimeout)
	}
	if s.MaxDuration < 0 || time.Duration(s.MaxDuration) > maxTimeout {
		errs.add(where+".maxDuration", "must be between 0 and %v", maxTimeout)
	}
	for _, pat := range sortedKeys(s.Tools) {
		switch s.Tools[pat] {
		case string(ext.ExposureDirect), string(ext.ExposureDeferred), string(ext.ExposureCodemode), string(catalog.Hidden):
		default:
			errs.add(where+".tools."+pat, "%q is not one of direct, deferred, codemode, hidden", clip(s.Tools[pat], 20))
		}
		if pat == "" {
			errs.add(where+".tools", "has an empty tool name")
		}
	}
	if v := s.ProtocolVersion; v != "" && v != ProtocolLatest && !slices.Contains(mcp.SupportedProtocolVersions(), v) {
		errs.add(where+".protocolVersion", "%q is not one of %s, %s", clip(v, 20), ProtocolLatest, strings.Join(mcp.SupportedProtocolVersions(), ", "))
	}
}

// secretName is what an operator secret's name may look like.
var secretName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$`)

// scopeToken is an OAuth scope (RFC 6749 §3.3: printable ASCII without
// space, quote or backslash).
var scopeToken = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]{1,256}$`)

// parseOAuth parses a server's oauth block. Values are never quoted: a
// pasted secret must not end up in an error.
func parseOAuth(raw json.RawMessage, where string, user bool, errs *problems) *OAuthConfig {
	fields, ok := object(raw, where, errs)
	if !ok {
		return nil
	}
	o := &OAuthConfig{}
	for _, k := range sortedKeys(fields) {
		v, at := fields[k], where+"."+k
		switch k {
		case "clientId":
			if id, ok := str(v, at, errs); ok {
				switch {
				case strings.TrimSpace(id) == "" || len(id) > 512 || strings.ContainsAny(id, "\r\n\x00"):
					errs.add(at, "must be a client ID (1 to 512 characters, one line)")
				default:
					o.ClientID = id
				}
			}
		case "clientSecret":
			if user {
				errs.add(at, "names an operator secret; your own servers cannot use one")
				continue
			}
			o.ClientSecret = secretRef(v, at, errs)
		case "scopes":
			if l, ok := strList(v, at, errs); ok {
				for i, sc := range l {
					if !scopeToken.MatchString(sc) {
						errs.add(fmt.Sprintf("%s[%d]", at, i), "is not an OAuth scope (printable characters, no spaces or quotes)")
					}
				}
				o.Scopes = l
			}
		case "grant", "tokenEndpointAuth", "tokenEndpoint":
			if user {
				errs.add(at, "is for the operator's shared servers only")
				continue
			}
			v, ok := str(v, at, errs)
			if !ok {
				continue
			}
			switch k {
			case "grant":
				if v != GrantAuthorizationCode && v != GrantClientCredentials {
					errs.add(at, "%q is not one of %s, %s", clip(v, 30), GrantAuthorizationCode, GrantClientCredentials)
				}
				o.Grant = v
			case "tokenEndpointAuth":
				if !slices.Contains([]string{authBasic, authPost, authJWT}, v) {
					errs.add(at, "%q is not one of %s, %s, %s", clip(v, 30), authBasic, authPost, authJWT)
				}
				o.TokenEndpointAuth = v
			case "tokenEndpoint":
				if u, err := url.Parse(v); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Fragment != "" {
					errs.add(at, "must be an http(s) URL without credentials or fragment")
				}
				o.TokenEndpoint = v
			}
		case "privateKey":
			if user {
				errs.add(at, "names an operator secret; your own servers cannot use one")
				continue
			}
			o.PrivateKey = secretRef(v, at, errs)
		case "allowDefaultEndpoints":
			if user {
				errs.add(at, "only the operator may allow a sign-in without the authorization server's metadata")
				continue
			}
			o.AllowDefaultEndpoints, _ = boolean(v, at, errs)
		default:
			errs.add(at, "unknown field%s", suggest(k, "clientId", "clientSecret", "scopes", "allowDefaultEndpoints",
				"grant", "privateKey", "tokenEndpointAuth", "tokenEndpoint"))
		}
	}
	if o.ClientSecret != nil && o.ClientID == "" {
		errs.add(where+".clientSecret", "needs clientId: a secret belongs to a registered client")
	}
	if o.Grant != GrantClientCredentials {
		for _, f := range []struct {
			k   string
			set bool
		}{{"privateKey", o.PrivateKey != nil}, {"tokenEndpointAuth", o.TokenEndpointAuth != ""}, {"tokenEndpoint", o.TokenEndpoint != ""}} {
			if f.set {
				errs.add(where+"."+f.k, "applies to grant client_credentials only")
			}
		}
		return o
	}
	switch {
	case o.ClientID == "":
		errs.add(where+".clientId", "is required by grant client_credentials")
	case (o.ClientSecret == nil) == (o.PrivateKey == nil):
		errs.add(where, "grant client_credentials needs either clientSecret (client_secret_basic or client_secret_post) or privateKey (private_key_jwt)")
	case o.TokenEndpointAuth == authJWT && o.PrivateKey == nil,
		(o.TokenEndpointAuth == authBasic || o.TokenEndpointAuth == authPost) && o.ClientSecret == nil:
		errs.add(where+".tokenEndpointAuth", "%s does not go with %s", o.TokenEndpointAuth,
			map[bool]string{true: "privateKey", false: "clientSecret"}[o.PrivateKey != nil])
	}
	return o
}

// The grants of [OAuthConfig.Grant], and the client authentications of
// [OAuthConfig.TokenEndpointAuth].
const (
	GrantAuthorizationCode = "authorization_code"
	GrantClientCredentials = "client_credentials"

	authBasic = "client_secret_basic"
	authPost  = "client_secret_post"
	authJWT   = "private_key_jwt"
)

// clientCredentials reports whether s gets its token with the client
// credentials grant.
func (s Server) clientCredentials() bool {
	return s.OAuth != nil && s.OAuth.Grant == GrantClientCredentials
}

// secretRef parses {"secret": NAME}, a reference to an operator secret.
func secretRef(v json.RawMessage, at string, errs *problems) *SecretRef {
	var ref map[string]json.RawMessage
	if err := json.Unmarshal(v, &ref); err != nil || ref == nil {
		errs.add(at, `must be {"secret": NAME}, a reference to an operator secret (agenthost secret set --operator NAME), never the value itself`)
		return nil
	}
	var name string
	for _, rk := range sortedKeys(ref) {
		if rk != "secret" {
			errs.add(at+"."+rk, "unknown field%s", suggest(rk, "secret"))
		} else if err := json.Unmarshal(ref[rk], &name); err != nil || !secretName.MatchString(name) {
			errs.add(at+".secret", "must be the name of an operator secret (letters, digits and _ . : @ -, at most 128)")
			name = ""
		}
	}
	if name == "" {
		return nil
	}
	return &SecretRef{Secret: name}
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if r > 127 || !(r == '-' || r == '_' || r == '.' || r == '!' || r == '#' || r == '$' || r == '%' || r == '&' ||
			r == '\'' || r == '*' || r == '+' || r == '^' || r == '`' || r == '|' || r == '~' ||
			('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			return false
		}
	}
	return true
}

// isAuthorization reports whether a header name is Authorization, in any
// spelling.
func isAuthorization(k string) bool {
	return http.CanonicalHeaderKey(strings.TrimSpace(k)) == "Authorization"
}

// Each yields the servers of the list, mcpServers then servers, each in
// name order.
func (l *ServerList) each(f func(name string, s Server)) {
	for _, m := range []map[string]Server{l.MCPServers, l.Servers} {
		for _, name := range sortedKeys(m) {
			f(name, m[name])
		}
	}
}

// decl turns a validated server into the catalog's declaration. name is
// the registered name ("u_x" for a user's own server x).
func decl(name string, s Server, own bool) catalog.ServerDecl {
	d := catalog.ServerDecl{
		Name:         name,
		Remote:       s.URL != "",
		Availability: s.Availability,
		Credentials:  s.Credentials,
		Enabled:      s.Enabled == nil || *s.Enabled,
		Users:        slices.Clone(s.Users),
		Timeout:      time.Duration(s.Timeout),
		MaxDuration:  time.Duration(s.MaxDuration),
		Spec:         &spec{name: name, server: s, own: own},
	}
	if d.Availability == "" {
		d.Availability = catalog.AvailabilityDefault
	}
	if d.Credentials == "" || own {
		d.Credentials = catalog.CredentialsUser
	}
	if d.Credentials == catalog.CredentialsShared {
		// Off until each user it is lent to switches it on: everyone sees
		// its switch off (the form is the same for all), so it must be.
		d.Availability = catalog.AvailabilityOptIn
	}
	if len(s.Tools) > 0 {
		d.Tools = catalog.ToolPolicy{}
		for pat, e := range s.Tools {
			d.Tools[pat] = ext.Exposure(e)
		}
	}
	// The pin is copied onto each tool; the operator approves the
	// changes of the operator's servers, each user their own servers'.
	if s.Pin == ext.PinWarn || s.Pin == ext.PinBlock {
		d.Pin, d.PinByOperator = s.Pin, !own
	}
	d.Fingerprint = fingerprint(d.Credentials, s)
	return d
}

// spec is a server as the connector sees it.
type spec struct {
	name   string
	server Server
	own    bool
	// entry is the operator's catalog entry a user's own server was added
	// from (usercatalog.go), or nil.
	entry *CatalogEntry
}

// fingerprint identifies what a connection depends on: the fields that
// reach the server. Timeouts, tool policies and switches are left out, so
// changing them keeps the connection.
func fingerprint(credentials string, s Server) string {
	b, _ := json.Marshal(struct {
		C, Cmd, Cwd, URL, Type, PV string
		Args, Readable             []string
		Env, Headers               map[string]string
		OAuth                      *OAuthConfig
		Sandbox                    *bool
	}{credentials, s.Command, s.Cwd, s.URL, s.Type, s.ProtocolVersion, s.Args, s.ReadablePaths, s.Env, s.Headers, s.OAuth, s.Sandbox})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// helpers for the hand-rolled decoder, which reports every problem.

func object(raw json.RawMessage, where string, errs *problems) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		if syn := (*json.SyntaxError)(nil); asSyntax(err, &syn) {
			errs.add(where, "is not valid JSON (at byte %d)", syn.Offset)
		} else {
			errs.add(where, "must be a JSON object")
		}
		return nil, false
	}
	return m, true
}

func asSyntax(err error, target **json.SyntaxError) bool {
	se, ok := err.(*json.SyntaxError)
	if ok {
		*target = se
	}
	return ok
}

func str(raw json.RawMessage, where string, errs *problems) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		errs.add(where, "must be a string")
		return "", false
	}
	return s, true
}

func boolean(raw json.RawMessage, where string, errs *problems) (bool, bool) {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		errs.add(where, "must be true or false")
		return false, false
	}
	return b, true
}

// byteCount parses a maxResultBytes: a whole number of bytes within
// bounds.
func byteCount(raw json.RawMessage, where string, errs *problems) (int64, bool) {
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < minResultBytes || n > maxResultBytes {
		errs.add(where, "must be a whole number of bytes from %d (1 KiB) to %d (1 GiB)", minResultBytes, maxResultBytes)
		return 0, false
	}
	return n, true
}

func strList(raw json.RawMessage, where string, errs *problems) ([]string, bool) {
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		errs.add(where, "must be a list of strings")
		return nil, false
	}
	return l, true
}

func strMap(raw json.RawMessage, where string, errs *problems) (map[string]string, bool) {
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		errs.add(where, "must be an object of strings")
		return nil, false
	}
	return m, true
}

func isEmpty(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// suggest returns ` (did you mean "x"?)` for the known word nearest to k,
// when it is near enough.
func suggest(k string, known ...string) string {
	best, bestD := "", 3
	for _, w := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(w)); d < bestD {
			best, bestD = w, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
