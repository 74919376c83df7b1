package extmcp_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/settings"
)

func ptr[T any](v T) *T { return &v }

func TestParseConfigValid(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		in   string
		want *extmcp.Config
	}{
		"empty":      {``, &extmcp.Config{}},
		"null":       {`null`, &extmcp.Config{}},
		"empty list": {`{"mcpServers": {}}`, &extmcp.Config{ServerList: extmcp.ServerList{MCPServers: map[string]extmcp.Server{}}}},
		"claude desktop": {
			`{"mcpServers": {"notes": {"command": "npx", "args": ["-y", "notes"], "env": {"A": "1"}},
			                 "search": {"url": "https://s.example/mcp", "headers": {"X-Key": "k"}}}}`,
			&extmcp.Config{ServerList: extmcp.ServerList{MCPServers: map[string]extmcp.Server{
				"notes":  {Command: "npx", Args: []string{"-y", "notes"}, Env: map[string]string{"A": "1"}},
				"search": {URL: "https://s.example/mcp", Headers: map[string]string{"X-Key": "k"}},
			}}},
		},
		"vs code": {
			`{"$schema": "x", "servers": {"fs": {"type": "stdio", "command": "fs-server"}, "remote": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}`,
			&extmcp.Config{ServerList: extmcp.ServerList{Servers: map[string]extmcp.Server{
				"fs":     {Type: "stdio", Command: "fs-server"},
				"remote": {Type: "sse", URL: "http://127.0.0.1:9/sse"},
			}}},
		},
		"every field": {
			`{"userServers": "all", "userServerAllowCIDRs": ["10.20.0.0/16", "fd00::1"], "userServerAllowHTTP": true, "maxResultBytes": 1048576,
			  "mcpServers": {"team": {"url": "https://t/mcp", "type": "http", "credentials": "shared",
			  "availability": "opt-in", "users": ["alice"], "sharedAuthority": "why", "timeout": "90s", "enabled": false,
			  "tools": {"delete_*": "hidden", "search": "deferred"}, "protocolVersion": "2025-11-25", "maxResultBytes": 16777216},
			  "b": {"command": "b", "cwd": "/tmp", "timeout": 2.5, "protocolVersion": "latest"},
			  "db": {"command": "db", "credentials": "shared", "users": ["alice"], "showOutputToUsers": true},
			  "intranet": {"url": "http://search.corp/mcp", "allowInsecureHTTP": true}}}`,
			&extmcp.Config{UserServers: "all", UserServerAllowCIDRs: []string{"10.20.0.0/16", "fd00::1"}, UserServerAllowHTTP: true,
				MaxResultBytes: 1 << 20, ServerList: extmcp.ServerList{MCPServers: map[string]extmcp.Server{
					"team": {URL: "https://t/mcp", Type: "http", Credentials: "shared", Availability: "opt-in", Users: []string{"alice"},
						SharedAuthority: "why", Timeout: extmcp.Duration(90 * time.Second), Enabled: ptr(false),
						Tools: map[string]string{"delete_*": "hidden", "search": "deferred"}, ProtocolVersion: "2025-11-25",
						MaxResultBytes: 16 << 20},
					"b":        {Command: "b", Cwd: "/tmp", Timeout: extmcp.Duration(2500 * time.Millisecond), ProtocolVersion: "latest"},
					"db":       {Command: "db", Credentials: "shared", Users: []string{"alice"}, ShowOutputToUsers: true},
					"intranet": {URL: "http://search.corp/mcp", AllowInsecureHTTP: true},
				}}},
		},
		"oauth": {
			`{"mcpServers": {"o": {"url": "https://o/mcp", "oauth": {"clientId": "agenthost-prod", "clientSecret": {"secret": "o-client"},
			  "scopes": ["read", "mcp:tools"]}}, "d": {"url": "https://d/mcp", "oauth": {}}}}`,
			&extmcp.Config{ServerList: extmcp.ServerList{MCPServers: map[string]extmcp.Server{
				"o": {URL: "https://o/mcp", OAuth: &extmcp.OAuthConfig{ClientID: "agenthost-prod",
					ClientSecret: &extmcp.SecretRef{Secret: "o-client"}, Scopes: []string{"read", "mcp:tools"}}},
				"d": {URL: "https://d/mcp", OAuth: &extmcp.OAuthConfig{}},
			}}},
		},
		"http to loopback needs no opt-in": {`{"mcpServers": {"a": {"url": "http://localhost:9/mcp"}, "b": {"url": "http://[::1]:9/mcp"}}}`,
			&extmcp.Config{ServerList: extmcp.ServerList{MCPServers: map[string]extmcp.Server{
				"a": {URL: "http://localhost:9/mcp"}, "b": {URL: "http://[::1]:9/mcp"}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := extmcp.ParseConfig(json.RawMessage(tc.in))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		in   string
		want []string // every problem, in order
	}{
		"not JSON":              {`{"mcpServers": `, []string{"config: is not valid JSON (at byte 15)"}},
		"not an object":         {`[1]`, []string{"config: must be a JSON object"}},
		"unknown top":           {`{"mcpServer": {}}`, []string{`mcpServer: unknown field (did you mean "mcpServers"?)`}},
		"bad policy":            {`{"userServers": "some"}`, []string{`userServers: "some" is not one of none, url, all`}},
		"servers not an object": {`{"servers": []}`, []string{"servers: must be a JSON object"}},
		"unknown field with suggestion": {`{"mcpServers": {"a": {"comand": "x"}}}`,
			[]string{`mcpServers.a.comand: unknown field (did you mean "command"?)`}},
		"bad names": {`{"mcpServers": {"a/b": {"command": "x"}, "": {"command": "x"}, "u_x": {"command": "x"}}}`, []string{
			"mcpServers.: the server name must match ^[A-Za-z0-9_-]{1,64}$",
			"mcpServers.a/b: the server name must match ^[A-Za-z0-9_-]{1,64}$",
			`mcpServers.u_x: names starting with "u_" are reserved for the users' own servers`,
		}},
		"too long a name": {`{"mcpServers": {"` + strings.Repeat("a", 65) + `": {"command": "x"}}}`,
			[]string{"mcpServers." + strings.Repeat("a", 65) + ": the server name must match ^[A-Za-z0-9_-]{1,64}$"}},
		"declared twice": {`{"mcpServers": {"a": {"command": "x"}}, "servers": {"a": {"command": "y"}}}`,
			[]string{"servers.a: the server is also declared as mcpServers.a"}},
		"both and neither": {`{"mcpServers": {"both": {"command": "x", "url": "https://h"}, "none": {"args": ["x"]}}}`, []string{
			"mcpServers.both: has both command and url; a server is either stdio (command) or remote (url)",
			"mcpServers.none: has neither command nor url",
		}},
		"wrong types": {`{"mcpServers": {"a": {"command": 1, "args": "x", "env": {"A": 1}, "enabled": "yes", "timeout": "soon"}}}`, []string{
			"mcpServers.a.args: must be a list of strings",
			"mcpServers.a.command: must be a string",
			"mcpServers.a.enabled: must be true or false",
			"mcpServers.a.env: must be an object of strings",
			`mcpServers.a.timeout: "soon" is not a duration such as 30s or 2m`,
		}},
		"bad enums": {`{"mcpServers": {"a": {"url": "https://h", "type": "ws", "credentials": "mine", "availability": "always",
			"tools": {"x": "visible", "": "direct"}, "protocolVersion": "2099-01-01"}}}`, []string{
			`mcpServers.a.type: "ws" is not one of http, sse`,
			`mcpServers.a.credentials: "mine" is not one of user, shared`,
			`mcpServers.a.availability: "always" is not one of default, opt-in`,
			`mcpServers.a.tools: has an empty tool name`,
			`mcpServers.a.tools.x: "visible" is not one of direct, deferred, codemode, hidden`,
			`mcpServers.a.protocolVersion: "2099-01-01" is not one of latest, 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05`,
		}},
		"shared without users": {`{"mcpServers": {"a": {"url": "https://h", "credentials": "shared"}}}`,
			[]string{"mcpServers.a.users: a shared server needs the list of users it is lent to"}},
		"shared on by default": {`{"mcpServers": {"a": {"url": "https://h", "credentials": "shared", "users": ["x"], "availability": "default"}}}`,
			[]string{"mcpServers.a.availability: a shared server is opt-in: each user it is lent to switches it on, after the warning; leave availability out"}},
		"users on a personal server": {`{"mcpServers": {"a": {"url": "https://h", "users": ["x"], "sharedAuthority": "y"}}}`, []string{
			"mcpServers.a.users: applies to shared servers only (credentials: shared)",
			"mcpServers.a.sharedAuthority: applies to shared servers only (credentials: shared)",
		}},
		"the operator as a user": {`{"mcpServers": {"a": {"url": "https://h", "credentials": "shared", "users": ["@operator", ""]}}}`, []string{
			`mcpServers.a.users[0]: "@operator" is not a user (a group is written group:NAME)`, `mcpServers.a.users[1]: "" is not a user (a group is written group:NAME)`,
		}},
		"groups in an allowlist": {`{"mcpServers": {"a": {"url": "https://h", "credentials": "shared", "users": ["group:eng", "alice", "group:", "group: x", "team:eng"]}}}`, []string{
			`mcpServers.a.users[2]: "group:" is not a group (want group:NAME, NAME 1-128 printable characters, no comma)`,
			`mcpServers.a.users[3]: "group: x" is not a group (want group:NAME, NAME 1-128 printable characters, no comma)`,
			`mcpServers.a.users[4]: "team:eng" is not a user (a group is written group:NAME)`,
		}},
		"stdio fields on a url": {`{"mcpServers": {"a": {"url": "https://h", "env": {"A": "b"}}}}`,
			[]string{"mcpServers.a: args, env and cwd apply to command servers only"}},
		"sandbox fields": {`{"sandbox": "yes", "mcpServers": {"a": {"url": "https://h", "sandbox": true}, "b": {"command": "x", "sandbox": 1, "readablePaths": ["rel"]}, "c": {"command": "x", "readablePaths": ["rel/x", "/ok"]}}}`, []string{
			"sandbox: must be true or false",
			"mcpServers.a: sandbox and readablePaths apply to command servers only",
			"mcpServers.b.sandbox: must be true or false",
			"mcpServers.c.readablePaths[0]: must be an absolute path",
		}},
		"url fields on a command": {`{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}, "type": "http"}}}`, []string{
			`mcpServers.a.type: "http" does not go with command; use stdio or leave it out`,
			"mcpServers.a.headers: applies to url servers only",
		}},
		"bad urls": {`{"mcpServers": {"a": {"url": "ftp://h"}, "b": {"url": "http://"}, "c": {"url": "https://u:p@h"}}}`, []string{
			"mcpServers.a.url: must start with http:// or https://",
			"mcpServers.b.url: has no host",
			"mcpServers.c.url: must not hold credentials; use headers or the users' tokens",
		}},
		"bad header and env names": {`{"mcpServers": {"a": {"url": "https://h", "headers": {"Bad Header": "x", "X": "a\nb"}},
			"b": {"command": "x", "env": {"1A": "x"}}}}`, []string{
			`mcpServers.a.headers: "Bad Header" is not a header name`,
			"mcpServers.a.headers.X: the value holds a line break or NUL",
			`mcpServers.b.env: "1A" is not a variable name`,
		}},
		"bad oauth": {`{"mcpServers": {"a": {"url": "https://h", "oauth": {"clientID": "x", "clientSecret": "s3cr3t-inline", "scopes": ["ok", "two words"]}},
			"b": {"command": "x", "oauth": {}}, "c": {"url": "https://h", "oauth": []}, "d": {"url": "https://h", "type": "sse", "oauth": {"clientId": ""}},
			"e": {"url": "https://h", "oauth": {"clientSecret": {"secret": "n", "value": "v"}}}, "f": {"url": "https://h", "oauth": {"clientId": "i", "clientSecret": {"secret": "bad name"}}}}}`, []string{
			`mcpServers.a.oauth.clientID: unknown field (did you mean "clientId"?)`,
			`mcpServers.a.oauth.clientSecret: must be {"secret": NAME}, a reference to an operator secret (agenthost secret set --operator NAME), never the value itself`,
			"mcpServers.a.oauth.scopes[1]: is not an OAuth scope (printable characters, no spaces or quotes)",
			"mcpServers.b.oauth: applies to url servers only: a stdio server takes a token (MCP_ACCESS_TOKEN)",
			"mcpServers.c.oauth: must be a JSON object",
			"mcpServers.d.oauth.clientId: must be a client ID (1 to 512 characters, one line)",
			`mcpServers.e.oauth.clientSecret.value: unknown field`,
			"mcpServers.e.oauth.clientSecret: needs clientId: a secret belongs to a registered client",
			"mcpServers.f.oauth.clientSecret.secret: must be the name of an operator secret (letters, digits and _ . : @ -, at most 128)",
		}},
		"client credentials": {`{"mcpServers": {
			"a": {"url": "https://h", "oauth": {"grant": "client_credentials", "clientId": "c", "clientSecret": {"secret": "s"}}},
			"b": {"url": "https://h", "credentials": "shared", "users": ["u"], "oauth": {"grant": "client_credentials", "clientSecret": {"secret": "s"}}},
			"c": {"url": "https://h", "credentials": "shared", "users": ["u"], "oauth": {"grant": "client_credentials", "clientId": "c"}},
			"d": {"url": "https://h", "credentials": "shared", "users": ["u"], "oauth": {"grant": "client_credentials", "clientId": "c",
				"clientSecret": {"secret": "s"}, "tokenEndpointAuth": "private_key_jwt", "tokenEndpoint": "ftp://x"}},
			"e": {"url": "https://h", "oauth": {"grant": "implicit", "privateKey": {"secret": "k"}, "tokenEndpointAuth": "tls_client_auth"}},
			"ok": {"url": "https://h", "credentials": "shared", "users": ["u"], "oauth": {"grant": "client_credentials", "clientId": "c",
				"privateKey": {"secret": "k"}, "tokenEndpoint": "https://as/token", "scopes": ["mcp"]}}}}`, []string{
			"mcpServers.a.oauth.grant: client_credentials applies to shared servers only (credentials: shared): the token is the operator's",
			"mcpServers.b.oauth.clientSecret: needs clientId: a secret belongs to a registered client",
			"mcpServers.b.oauth.clientId: is required by grant client_credentials",
			"mcpServers.c.oauth: grant client_credentials needs either clientSecret (client_secret_basic or client_secret_post) or privateKey (private_key_jwt)",
			"mcpServers.d.oauth.tokenEndpoint: must be an http(s) URL without credentials or fragment",
			"mcpServers.d.oauth.tokenEndpointAuth: private_key_jwt does not go with clientSecret",
			`mcpServers.e.oauth.grant: "implicit" is not one of authorization_code, client_credentials`,
			`mcpServers.e.oauth.tokenEndpointAuth: "tls_client_auth" is not one of client_secret_basic, client_secret_post, private_key_jwt`,
			"mcpServers.e.oauth.privateKey: applies to grant client_credentials only",
			"mcpServers.e.oauth.tokenEndpointAuth: applies to grant client_credentials only",
		}},
		"plain http beyond loopback": {`{"mcpServers": {"search": {"url": "http://search.corp/mcp"}, "ok": {"url": "http://search.corp/mcp", "allowInsecureHTTP": false}}}`, []string{
			"mcpServers.ok.url: plain http to search.corp would send the users' tokens across the network in clear text: use https, or set allowInsecureHTTP: true on this server",
			"mcpServers.search.url: plain http to search.corp would send the users' tokens across the network in clear text: use https, or set allowInsecureHTTP: true on this server",
		}},
		"bad network fields": {`{"userServerAllowCIDRs": ["10.0.0.0/8", "10.0.0.0/33"], "userServerAllowHTTP": "yes", "maxResultBytes": 10,
			"mcpServers": {"a": {"url": "https://h", "maxResultBytes": 1.5, "allowInsecureHTTP": 1}}}`, []string{
			"maxResultBytes: must be a whole number of bytes from 1024 (1 KiB) to 1073741824 (1 GiB)",
			`userServerAllowCIDRs: entry 1 ("10.0.0.0/33") is not a CIDR prefix such as 10.0.0.0/8`,
			"userServerAllowHTTP: must be true or false",
			"mcpServers.a.allowInsecureHTTP: must be true or false",
			"mcpServers.a.maxResultBytes: must be a whole number of bytes from 1024 (1 KiB) to 1073741824 (1 GiB)",
		}},
		"showOutputToUsers on a server of the users' own credentials": {`{"mcpServers": {"a": {"command": "x", "showOutputToUsers": true}, "b": {"command": "x", "credentials": "shared", "users": ["u"], "showOutputToUsers": "yes"}}}`, []string{
			"mcpServers.a.showOutputToUsers: applies to shared servers only (credentials: shared); users always see why their own processes failed",
			"mcpServers.b.showOutputToUsers: must be true or false",
		}},
		"timeouts": {`{"mcpServers": {"a": {"command": "x", "timeout": -1}, "b": {"command": "x", "timeout": "48h"}}}`, []string{
			"mcpServers.a.timeout: -1 seconds is out of range",
			"mcpServers.b.timeout: must be between 0 and 24h0m0s",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := extmcp.ParseConfig(json.RawMessage(tc.in))
			var ce *extmcp.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ext.ErrInvalidArgument) {
				t.Fatalf("ParseConfig: %v; want a *ConfigError wrapping ErrInvalidArgument", err)
			}
			if diff := cmp.Diff(tc.want, ce.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseServerList(t *testing.T) {
	t.Parallel()
	if _, err := extmcp.ParseServerList(json.RawMessage(`{"mcpServers": {"mine": {"url": "https://m/mcp", "timeout": "5s"}}}`)); err != nil {
		t.Errorf("a valid own list: %v", err)
	}
	_, err := extmcp.ParseServerList(json.RawMessage(`{"userServers": "all", "sandbox": false, "mcpServers": {"x": {"command": "c", "sandbox": false, "readablePaths": ["/"],
		"credentials": "shared", "users": ["bob"], "availability": "opt-in", "sharedAuthority": "s",
		"env": {"LD_PRELOAD": "/evil.so", "NODE_OPTIONS": "--require x", "OK": "1"}},
		"y": {"url": "http://plain.example/mcp", "maxResultBytes": 1073741824, "allowInsecureHTTP": true, "showOutputToUsers": true}}}`))
	var ce *extmcp.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("ParseServerList: %v", err)
	}
	want := []string{
		`userServers: is the operator's policy; it does not belong in your list`,
		`sandbox: is the operator's policy; it does not belong in your list`,
		"mcpServers.x: sandbox and readablePaths are for the operator's servers only; your stdio servers always run in the host's sandbox",
		"mcpServers.x.env.LD_PRELOAD: your own servers may not set LD_PRELOAD",
		"mcpServers.x.env.NODE_OPTIONS: your own servers may not set NODE_OPTIONS",
		"mcpServers.x.availability: is for the operator's servers only; your servers always use your own credentials",
		"mcpServers.x.credentials: is for the operator's servers only; your servers always use your own credentials",
		"mcpServers.x.sharedAuthority: is for the operator's servers only; your servers always use your own credentials",
		"mcpServers.x.users: is for the operator's servers only; your servers always use your own credentials",
		"mcpServers.y.allowInsecureHTTP: is for the operator's servers only; the operator sets it for the users' servers",
		"mcpServers.y.maxResultBytes: is for the operator's servers only; the operator sets it for the users' servers",
		"mcpServers.y.showOutputToUsers: is for the operator's servers only; the operator sets it for the users' servers",
	}
	got := append([]string(nil), ce.Problems...)
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	// Their own remote servers may sign in with a client of their own, but
	// not with the operator's secrets.
	if _, err := extmcp.ParseServerList(json.RawMessage(`{"mcpServers": {"o": {"url": "https://o/mcp", "oauth": {"clientId": "mine", "scopes": ["a"]}}}}`)); err != nil {
		t.Errorf("an own server with oauth: %v", err)
	}
	_, err = extmcp.ParseServerList(json.RawMessage(`{"mcpServers": {"o": {"url": "https://o/mcp", "oauth": {"clientId": "c", "clientSecret": {"secret": "prod"}}}}}`))
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0] != "mcpServers.o.oauth.clientSecret: names an operator secret; your own servers cannot use one" {
		t.Errorf("an own server naming an operator secret: %v", err)
	}
	_, err = extmcp.ParseServerList(json.RawMessage(`{"mcpServers": {"o": {"url": "https://o/mcp", "oauth": {"allowDefaultEndpoints": true}}}}`))
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0] != "mcpServers.o.oauth.allowDefaultEndpoints: only the operator may allow a sign-in without the authorization server's metadata" {
		t.Errorf("an own server allowing the default endpoints: %v", err)
	}
	_, err = extmcp.ParseServerList(json.RawMessage(`{"mcpServers": {"o": {"url": "https://o/mcp", "oauth": {"grant": "client_credentials", "clientId": "c"}}}}`))
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0] != "mcpServers.o.oauth.grant: is for the operator's shared servers only" {
		t.Errorf("an own server on the client credentials grant: %v", err)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestConfigErrorsHoldNoSecrets checks that env and header values never
// appear in a validation error.
func TestConfigErrorsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	_, err := extmcp.ParseConfig(json.RawMessage(`{"mcpServers": {
		"a": {"url": "https://h", "headers": {"Authorization": "Bearer CANARY-1\n"}, "env": {"T": "CANARY-2"}},
		"b": {"command": "x", "env": {"T": "CANARY-3\u0000"}, "headers": {"K": "CANARY-4"}}}}`))
	if err == nil || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("error %v", err)
	}
}

// TestServerListSchema checks the generated JSON Schema: it compiles, and
// accepts and refuses what the validator does for the common mistakes.
func TestServerListSchema(t *testing.T) {
	t.Parallel()
	raw, err := extmcp.ServerListSchema()
	if err != nil {
		t.Fatal(err)
	}
	s, err := settings.CompileSchema(raw)
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	for doc, ok := range map[string]bool{
		`{"mcpServers": {"a": {"command": "x", "args": ["y"], "timeout": "30s"}}}`:                true,
		`{"servers": {"a": {"url": "https://h/mcp", "type": "sse", "timeout": 12}}}`:              true,
		`{"mcpServers": {"a": {"url": "https://h", "tools": {"x": "hidden"}, "enabled": false}}}`: true,
		`{"mcpServers": {"a": {"comand": "x"}}}`:                                                  false,
		`{"mcpServers": {"a/b": {"command": "x"}}}`:                                               false,
		`{"mcpServers": {"a": {"command": "x", "url": "https://h"}}}`:                             false,
		`{"mcpServers": {"a": {}}}`:                                                               false,
		`{"mcpServers": {"a": {"url": "https://h", "type": "ws"}}}`:                               false,
		`{"mcpServers": {"a": {"command": "x", "timeout": "soon"}}}`:                              false,
	} {
		if err := s.Validate(json.RawMessage(doc)); (err == nil) != ok {
			t.Errorf("schema on %s: %v; want ok=%v", doc, err, ok)
		}
	}
}

// FuzzParseConfig checks that the parser never panics, that a config it
// accepts survives a round trip through JSON, and that its errors always
// wrap ErrInvalidArgument.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"mcpServers": {"a": {"command": "x", "args": ["1"], "env": {"A": "b"}, "timeout": "1s"}}}`,
		`{"userServers": "url", "servers": {"b": {"url": "https://h/mcp", "headers": {"X": "y"}, "type": "sse"}}}`,
		`{"mcpServers": {"t": {"url": "https://h", "credentials": "shared", "users": ["u"], "tools": {"*": "hidden"}, "timeout": 3}}}`,
		`{"mcpServers": {"a": {"comand": "x"}, "b/c": {}}}`, `[`, `{"mcpServers": null}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := extmcp.ParseConfig(json.RawMessage(in))
		if err != nil {
			if !errors.Is(err, ext.ErrInvalidArgument) {
				t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshalling an accepted config: %v", err)
		}
		again, err := extmcp.ParseConfig(b)
		if err != nil {
			t.Fatalf("an accepted config fails after a round trip: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(normalize(cfg), normalize(again)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, again)
		}
	})
}

// normalize maps empty maps and lists to nil, which JSON's omitempty does.
func normalize(c *extmcp.Config) *extmcp.Config {
	out := *c
	fix := func(m map[string]extmcp.Server) map[string]extmcp.Server {
		if len(m) == 0 {
			return nil
		}
		n := map[string]extmcp.Server{}
		for k, s := range m {
			if len(s.Args) == 0 {
				s.Args = nil
			}
			if len(s.Env) == 0 {
				s.Env = nil
			}
			if len(s.Headers) == 0 {
				s.Headers = nil
			}
			if len(s.Users) == 0 {
				s.Users = nil
			}
			if len(s.Tools) == 0 {
				s.Tools = nil
			}
			n[k] = s
		}
		return n
	}
	out.MCPServers, out.Servers = fix(c.MCPServers), fix(c.Servers)
	return &out
}
