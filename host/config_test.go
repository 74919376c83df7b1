package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/host"
)

// TestConfigTrustedProxies: trustedProxies takes CIDRs and single
// addresses; a bad entry is an error naming the field, the entry's index
// and the entry, beside the file's other errors.
func TestConfigTrustedProxies(t *testing.T) {
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"trustedProxies":["10.0.0.0/8","2001:db8::/32","127.0.0.1"]}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.0.0.0/8", "2001:db8::/32", "127.0.0.1"}, cfg.TrustedProxies); diff != "" {
		t.Errorf("trustedProxies (-want +got):\n%s", diff)
	}
	_, err = host.ParseConfig([]byte(`{"extensions":{},"secrets":{"backend":"nope"},"trustedProxies":["10.0.0.0/8","10.0.0.0/33"]}`), t.TempDir())
	for _, want := range []string{`trustedProxies: entry 1 ("10.0.0.0/33") is not a CIDR`, "secrets.backend"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig with bad entries = %v, want it to say %s", err, want)
		}
	}
	if err := (&host.Config{TrustedProxies: []string{"10.0.0.0/8", "nope"}}).CheckListen(); err == nil ||
		!strings.Contains(err.Error(), `trustedProxies: entry 1 ("nope")`) {
		t.Errorf("CheckListen = %v", err)
	}
}

// TestMCPConfig: the MCP endpoint's session bounds parse, and bad ones are
// refused naming the field.
func TestMCPConfig(t *testing.T) {
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"mcp":{"sessionIdleMinutes":5,"maxSessionsPerUser":8,"maxSessions":100}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MCP != (host.MCPConfig{SessionIdleMinutes: 5, MaxSessionsPerUser: 8, MaxSessions: 100}) {
		t.Errorf("parsed %+v", cfg.MCP)
	}
	for raw, want := range map[string]string{
		`{"sessionIdleMinutes":-1}`:                  "mcp.sessionIdleMinutes: must not be negative",
		`{"maxSessionsPerUser":-2}`:                  "mcp.maxSessionsPerUser: must not be negative",
		`{"maxOpenRequestsPerUser":-1}`:              "mcp.maxOpenRequestsPerUser: must not be negative",
		`{"maxSessions":-3}`:                         "mcp.maxSessions: must not be negative",
		`{"maxSessionsPerUser":50,"maxSessions":10}`: "mcp.maxSessionsPerUser: 50 is more than mcp.maxSessions (10)",
		`{"sessionIdle":5}`:                          "sessionIdle",
		`{"maxSessions":"many"}`:                     "maxSessions",
	} {
		_, err := host.ParseConfig([]byte(`{"extensions":{},"mcp":`+raw+`}`), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mcp %s: %v, want an error naming %q", raw, err, want)
		}
	}
}

// TestTelemetryConfig: the telemetry block parses, and bad values are
// refused naming the field.
func TestTelemetryConfig(t *testing.T) {
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"telemetry":{"metrics":true,"otlpEndpoint":"http://127.0.0.1:4318","maxSeries":50}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Telemetry != (host.TelemetryConfig{Metrics: true, OTLPEndpoint: "http://127.0.0.1:4318", MaxSeries: 50}) {
		t.Errorf("parsed %+v", cfg.Telemetry)
	}
	for raw, want := range map[string]string{
		`{"maxSeries":-1}`:                  "telemetry.maxSeries: must not be negative",
		`{"otlpEndpoint":"collector:4318"}`: `telemetry.otlpEndpoint: "collector:4318" is not an http(s) URL`,
		`{"otlpEndpoint":"ftp://c"}`:        "telemetry.otlpEndpoint",
		`{"prometheus":true}`:               "prometheus",
	} {
		_, err := host.ParseConfig([]byte(`{"extensions":{},"telemetry":`+raw+`}`), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("telemetry %s: %v, want an error naming %q", raw, err, want)
		}
	}
}

// TestOAuthConfig: the oauth block's defaults, and every bad value refused
// with its field named.
func TestOAuthConfig(t *testing.T) {
	t.Parallel()
	const hash = `$2b$12$KIXQJQ4G2m3b6UeP0vZgYOaA1sK4t0pMjJX7b8c9d0e1f2g3h4i5j`
	cfg, err := host.ParseConfig([]byte(`{"extensions":{}}`), t.TempDir())
	if err != nil || !cfg.OAuth.On() {
		t.Fatalf("no oauth block: %+v, %v; want it on", cfg.OAuth, err)
	}
	cfg, err = host.ParseConfig([]byte(`{"extensions":{},"oauth":{"enabled":false}}`), t.TempDir())
	if err != nil || cfg.OAuth.On() {
		t.Errorf("enabled false: %+v, %v", cfg.OAuth, err)
	}
	cfg, err = host.ParseConfig([]byte(`{"extensions":{},"oauth":{"accessTokenMinutes":15,"refreshTokenDays":7,
		"passphraseHash":"`+hash+`","passphraseUser":"alice","allowedRedirectHosts":["claude.ai"]}}`), t.TempDir())
	if err != nil || cfg.OAuth.AccessTokenMinutes != 15 || cfg.OAuth.PassphraseUser != "alice" {
		t.Errorf("a full block: %+v, %v", cfg.OAuth, err)
	}
	for block, want := range map[string]string{
		`{"acessTokenMinutes":5}`:                                  `oauth: unknown field "acessTokenMinutes"`,
		`{"accessTokenMinutes":2000}`:                              "oauth.accessTokenMinutes: 2000 is not between 1 and 1440",
		`{"accessTokenMinutes":-1}`:                                "oauth.accessTokenMinutes",
		`{"refreshTokenDays":400}`:                                 "oauth.refreshTokenDays",
		`{"enabled":"yes"}`:                                        "oauth: ",
		`{"passphraseHash":"hunter2hunter2"}`:                      "oauth.passphraseHash: not a bcrypt hash",
		`{"passphraseHash":"` + hash + `"}`:                        "oauth.passphraseUser: required",
		`{"passphraseUser":"alice"}`:                               "oauth.passphraseHash: required",
		`{"passphraseHash":"` + hash + `","passphraseUser":"@op"}`: "oauth.passphraseUser",
		`{"allowedRedirectHosts":["https://claude.ai"]}`:           "oauth.allowedRedirectHosts[0]",
	} {
		_, err := host.ParseConfig([]byte(`{"extensions":{},"oauth":`+block+`}`), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("oauth %s: %v, want an error with %q", block, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error repeats the passphrase-looking value: %v", err)
		}
	}
}

// TestOIDCConfig: the oidc block's defaults, and the refusals: no
// admission rule, an http issuer beyond loopback, a client secret
// extension that is not there, a bad user in the list.
func TestOIDCConfig(t *testing.T) {
	t.Parallel()
	const exts = `"extensions":{"mcp":{"path":"/bin/true"}}`
	cfg, err := host.ParseConfig([]byte(`{`+exts+`,"oidc":{"issuer":"https://accounts.google.com","clientID":"c","clientSecret":"oidc","allowedDomains":["@Example.com"]}}`), t.TempDir())
	if err != nil || !cfg.OIDC.On() {
		t.Fatalf("a minimal block: %+v, %v", cfg.OIDC, err)
	}
	d := cfg.OIDC.WithDefaults(cfg.Extensions)
	if d.UserClaim != "email" || d.GroupsClaim != "groups" || d.ClientSecretExtension != "mcp" || d.AllowedDomains[0] != "example.com" || len(d.Scopes) != 2 || d.RecheckMinutes != 15 {
		t.Errorf("defaults: %+v", d)
	}
	if cfg, err := host.ParseConfig([]byte(`{`+exts+`}`), t.TempDir()); err != nil || cfg.OIDC.On() {
		t.Errorf("no oidc block: %+v %v", cfg.OIDC, err)
	}
	for block, want := range map[string]string{
		`{"issuer":"https://i","clientID":"c","clientSecret":"s"}`:                                                      "oidc: set allowedDomains, allowedGroups or allowedUsers",
		`{"issuer":"http://idp.example.com","clientID":"c","clientSecret":"s","allowedGroups":["g"]}`:                   "oidc.issuer: \"http://idp.example.com\" must be https",
		`{"issuer":"http://127.0.0.1:5556","clientID":"c","clientSecret":"s","allowedGroups":["g"],"x":1}`:              `oidc: unknown field "x"`,
		`{"issuer":"https://i","clientSecret":"s","allowedGroups":["g"]}`:                                               "oidc.clientID: required",
		`{"issuer":"https://i","clientID":"c","allowedGroups":["g"]}`:                                                   "oidc.clientSecret: required",
		`{"issuer":"https://i","clientID":"c","clientSecret":"s","clientSecretExtension":"nope","allowedGroups":["g"]}`: `oidc.clientSecretExtension: "nope"`,
		`{"issuer":"https://i","clientID":"c","clientSecret":"s","allowedUsers":["@op"]}`:                               "oidc.allowedUsers[0]",
		`{"issuer":"https://i","clientID":"c","clientSecret":"s","allowedDomains":["https://x.com"]}`:                   "oidc.allowedDomains[0]",
		`{"issuer":"https://i","clientID":"c","clientSecret":"s","allowedGroups":["g"],"userClaim":"a b"}`:              "oidc.userClaim",
	} {
		_, err := host.ParseConfig([]byte(`{`+exts+`,"oidc":`+block+`}`), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("oidc %s: %v, want an error with %q", block, err, want)
		}
	}
}

// TestAuditConfig: the audit block is read, and negative bounds refused.
func TestAuditConfig(t *testing.T) {
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"audit":{"retentionDays":7,"maxRows":10,"bodies":true}}`), t.TempDir())
	if err != nil || cfg.Audit.RetentionDays != 7 || cfg.Audit.MaxRows != 10 || !cfg.Audit.Bodies {
		t.Fatalf("audit block = %+v, %v", cfg, err)
	}
	if _, err := host.ParseConfig([]byte(`{"extensions":{},"audit":{"maxRows":-1}}`), t.TempDir()); err == nil || !strings.Contains(err.Error(), "audit") {
		t.Errorf("negative maxRows: %v", err)
	}
}

// TestDataPathOfABrokenFile: the data folder is found in a file that
// breaks after its dataDir (agenthost reload reaches the running host,
// which names what is wrong), and not where the file breaks before it.
func TestDataPathOfABrokenFile(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":{"dataDir":"x"},"b":[1,"dataDir"],"dataDir":"d", oops`: "d",
		`{"listen":"1", "dataDir": "data", oops}`:                    "data",
		`{oops "dataDir":"x"}`:                                       ".agenthost",
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "agenthost.json")
		if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := host.DataPathOf(p)
		if err != nil || got != filepath.Join(dir, want) {
			t.Errorf("DataPathOf(%s) = %q, %v; want %q", in, got, err, filepath.Join(dir, want))
		}
	}
}
