package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/agenthost/agenthost/host/internal/guard"
)

// DefaultConfigFile is the operator's file read when --config is not given.
const DefaultConfigFile = "agenthost.json"

// Config is the operator's file. Relative paths resolve against the file's
// folder.
type Config struct {
	// Listen is the address of the HTTP surfaces (MCP endpoint, settings UI).
	Listen string `json:"listen,omitempty"`
	// DataDir holds settings, secrets and per-user folders (default
	// ".agenthost" next to the file).
	DataDir string `json:"dataDir,omitempty"`
	// Extensions maps an extension's name to how it is launched.
	Extensions map[string]ExtensionConfig `json:"extensions"`
	// Services bounds per-user service processes.
	Services ServicesConfig `json:"services,omitzero"`
	// MCP bounds the sessions of the MCP endpoint (/mcp).
	MCP MCPConfig `json:"mcp,omitzero"`
	// Secrets chooses where secrets are kept.
	Secrets SecretsConfig `json:"secrets,omitzero"`
	// TLS serves the HTTP surfaces over TLS.
	TLS TLSConfig `json:"tls,omitzero"`
	// PublicURL is the address people and clients use to reach the host
	// (for sign-in links and the MCP URL shown), when it differs from
	// Listen (a reverse proxy).
	PublicURL string `json:"publicURL,omitempty"`
	// AllowedOrigins lists browser origins allowed to call the MCP
	// endpoint besides loopback ones.
	AllowedOrigins []string `json:"allowedOrigins,omitempty"`
	// TrustedProxies lists the reverse proxies (CIDRs, or single IP
	// addresses) whose X-Forwarded-For header names the client, for the
	// lockout of failed sign-ins. From any other peer the header is
	// ignored.
	TrustedProxies []string `json:"trustedProxies,omitempty"`
	// OAuth configures the OAuth authorization server that lets apps such
	// as Claude's custom connectors connect to /mcp.
	OAuth OAuthConfig `json:"oauth,omitzero"`
	// OIDC names the OpenID Connect provider people sign in with; nil
	// signs in with tokens and one-time links only.
	OIDC *OIDCConfig `json:"oidc,omitempty"`
	// Audit configures the audit log (on by default).
	Audit AuditConfig `json:"audit,omitzero"`
	// Telemetry turns on metrics (/metrics) and traces (OTLP export).
	Telemetry TelemetryConfig `json:"telemetry,omitzero"`
	// Policy allows or denies tools per user or group and asks approval
	// of the calls that change things (nil: every user has all their
	// tools, no approval).
	Policy *PolicyConfig `json:"policy,omitempty"`
	// Limits bounds each user's tool calls (README "Rate limits"); none
	// by default.
	Limits LimitsConfig `json:"limits,omitzero"`

	// dir is the folder of the file, for relative paths.
	dir string
	// file is the file itself (LoadConfig), hidden from sandboxes.
	file string
}

// TelemetryConfig is the operator's metrics and traces (all off by
// default).
type TelemetryConfig struct {
	// Metrics serves the Prometheus text of the host's metrics at
	// /metrics, for operator tokens only.
	Metrics bool `json:"metrics,omitempty"`
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector
	// ("http://collector:4318"): the host exports its traces and metrics
	// there. Empty: the environment's OTEL_EXPORTER_OTLP_ENDPOINT, if any.
	OTLPEndpoint string `json:"otlpEndpoint,omitempty"`
	// MaxSeries caps the distinct server and tool names in metric labels
	// (default 200); later ones are counted as "other".
	MaxSeries int `json:"maxSeries,omitempty"`
}

// ExtensionConfig is one extension in the operator's file.
type ExtensionConfig struct {
	// Path is the extension binary.
	Path string `json:"path"`
	// SHA256 pins the binary; a mismatch refuses to start the extension.
	SHA256 string `json:"sha256,omitempty"`
	// Args are passed to the binary.
	Args []string `json:"args,omitempty"`
	// Env sets variables in the extension's environment. The host's own
	// environment is never passed on, but for PATH, LANG, LC_ALL, LC_CTYPE,
	// TZ and TMPDIR.
	Env map[string]string `json:"env,omitempty"`
	// Config is handed to the extension untouched; the extension validates
	// it.
	Config json.RawMessage `json:"config,omitempty"`
	// Disabled keeps the extension declared but not started.
	Disabled bool `json:"disabled,omitempty"`
	// ActAsUsers grants the extension [ext.UserActor]: minting scoped,
	// expiring tokens for any user and calling any user's tools within a
	// scope. It makes the extension as powerful as every user together;
	// grant it only to an extension you trust as you trust the host
	// (default: not granted).
	ActAsUsers bool `json:"actAsUsers,omitempty"`
}

// ServicesConfig bounds per-user service processes.
type ServicesConfig struct {
	// IdleMinutes is how long an unused process lives, and how long a user
	// with no calls, no open session and no other activity stays active
	// before being deactivated, freeing their connections and processes
	// (default 10; fractions of a minute are allowed).
	IdleMinutes float64 `json:"idleMinutes,omitempty"`
	// MaxProcesses caps running processes (default 256).
	MaxProcesses int `json:"maxProcesses,omitempty"`
	// ConnectWaitSeconds bounds how long a connect waits for a free slot
	// when every process is busy (default 10).
	ConnectWaitSeconds float64 `json:"connectWaitSeconds,omitempty"`
	// SandboxUIDs is the range of uids given to users' sandboxed
	// processes, one uid per user, when the host runs as root (default
	// first 600000000, count 1000000). It must hold no real account.
	SandboxUIDs UIDRange `json:"sandboxUIDs,omitzero"`
	// UnsafeSharedUID runs untrusted processes (users' own stdio servers)
	// unsandboxed, as the host's own user, where no sandbox works: they
	// can then read the data folder (the secrets key, the databases) and
	// other users' tokens. Without it such a host refuses to start an
	// extension that asks for sandboxed processes.
	UnsafeSharedUID bool `json:"unsafeSharedUID,omitempty"`
}

// UIDRange is a range of uids.
type UIDRange struct {
	First int `json:"first"`
	Count int `json:"count"`
}

// MCPConfig bounds the sessions of the MCP endpoint. Zero fields take the
// defaults.
type MCPConfig struct {
	// SessionIdleMinutes closes a session that had no request for that
	// long (default 30); its client starts a new one.
	SessionIdleMinutes float64 `json:"sessionIdleMinutes,omitempty"`
	// MaxSessionsPerUser caps one user's open sessions (default 64); a new
	// one beyond it closes the user's least recently used idle session.
	MaxSessionsPerUser int `json:"maxSessionsPerUser,omitempty"`
	// MaxSessions caps all open sessions (default 10000); beyond it a new
	// session is refused with 503.
	MaxSessions int `json:"maxSessions,omitempty"`
	// MaxOpenRequestsPerUser caps one user's requests open at once on the
	// stateless revision, 2026-07-28 (default 256): calls in flight and
	// subscriptions/listen streams; one more is refused with 429.
	MaxOpenRequestsPerUser int `json:"maxOpenRequestsPerUser,omitempty"`
}

// TLSConfig names the certificate and key files (PEM).
type TLSConfig struct {
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
}

// DefaultListen is the address of the HTTP surfaces when the file names
// none: loopback only.
const DefaultListen = "127.0.0.1:7777"

// SecretsConfig chooses the secrets backend.
type SecretsConfig struct {
	// Backend is "auto" (the OS keychain when reachable, else the encrypted
	// file), "keychain", "file" or "memory" (tests only: lost on exit).
	Backend string `json:"backend,omitempty"`
}

var (
	extensionName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	envKey        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	sha256Hex     = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// LoadConfig reads and validates the operator's file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("resolving config path: %w", err)
	}
	cfg, err := ParseConfig(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.file = abs
	return cfg, nil
}

// ParseConfig parses and validates an operator's file whose relative paths
// resolve against dir. Errors name the field.
func ParseConfig(data []byte, dir string) (*Config, error) {
	var top struct {
		Listen         string                     `json:"listen"`
		DataDir        string                     `json:"dataDir"`
		Extensions     map[string]json.RawMessage `json:"extensions"`
		Services       ServicesConfig             `json:"services"`
		MCP            MCPConfig                  `json:"mcp"`
		Secrets        SecretsConfig              `json:"secrets"`
		TLS            TLSConfig                  `json:"tls"`
		PublicURL      string                     `json:"publicURL"`
		AllowedOrigins []string                   `json:"allowedOrigins"`
		TrustedProxies []string                   `json:"trustedProxies"`
		OAuth          json.RawMessage            `json:"oauth"`
		OIDC           json.RawMessage            `json:"oidc"`
		Audit          AuditConfig                `json:"audit"`
		Telemetry      TelemetryConfig            `json:"telemetry"`
		Policy         *PolicyConfig              `json:"policy"`
		Limits         json.RawMessage            `json:"limits"`
	}
	if err := strictDecode(data, &top); err != nil {
		return nil, err
	}
	cfg := &Config{
		Listen: top.Listen, DataDir: top.DataDir, Services: top.Services, MCP: top.MCP, Secrets: top.Secrets,
		TLS: top.TLS, PublicURL: top.PublicURL, AllowedOrigins: top.AllowedOrigins, TrustedProxies: top.TrustedProxies,
		Extensions: map[string]ExtensionConfig{}, dir: dir, Audit: top.Audit, Telemetry: top.Telemetry, Policy: top.Policy,
	}
	var errs []error
	names := make([]string, 0, len(top.Extensions))
	for name := range top.Extensions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var ec ExtensionConfig
		if err := strictDecode(top.Extensions[name], &ec); err != nil {
			errs = append(errs, fmt.Errorf("extensions.%s: %w", name, err))
			continue
		}
		if err := ec.validate(name); err != nil {
			errs = append(errs, err)
			continue
		}
		cfg.Extensions[name] = ec
	}
	if cfg.Telemetry.MaxSeries < 0 {
		errs = append(errs, fmt.Errorf("telemetry.maxSeries: must not be negative"))
	}
	if u := cfg.Telemetry.OTLPEndpoint; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("telemetry.otlpEndpoint: %q is not an http(s) URL", u))
		}
	}
	if cfg.Services.IdleMinutes < 0 {
		errs = append(errs, fmt.Errorf("services.idleMinutes: must not be negative"))
	}
	if cfg.Services.MaxProcesses < 0 {
		errs = append(errs, fmt.Errorf("services.maxProcesses: must not be negative"))
	}
	if cfg.Services.ConnectWaitSeconds < 0 {
		errs = append(errs, fmt.Errorf("services.connectWaitSeconds: must not be negative"))
	}
	if r := cfg.Services.SandboxUIDs; r != (UIDRange{}) && (r.First < 1 || r.Count < 1 || r.First > 1<<31-1-r.Count) {
		errs = append(errs, fmt.Errorf("services.sandboxUIDs: want first ≥ 1 and count ≥ 1 with first+count below 2147483647"))
	}
	errs = append(errs, cfg.MCP.validate()...)
	errs = append(errs, cfg.Audit.validate()...)
	errs = append(errs, cfg.Policy.validate()...)
	if len(top.Limits) > 0 && string(top.Limits) != "null" {
		if err := strictDecode(top.Limits, &cfg.Limits); err != nil {
			errs = append(errs, fmt.Errorf("limits: %w", err))
		} else if err := cfg.Limits.Validate("limits"); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, cfg.validateListen()...)
	if len(top.OAuth) > 0 {
		if err := strictDecode(top.OAuth, &cfg.OAuth); err != nil {
			errs = append(errs, fmt.Errorf("oauth: %w", err))
		} else {
			errs = append(errs, cfg.OAuth.validate()...)
		}
	}
	if len(top.OIDC) > 0 && string(top.OIDC) != "null" {
		cfg.OIDC = &OIDCConfig{}
		if err := strictDecode(top.OIDC, cfg.OIDC); err != nil {
			errs = append(errs, fmt.Errorf("oidc: %w", err))
		} else {
			errs = append(errs, cfg.OIDC.validate(cfg.Extensions)...)
		}
	}
	switch cfg.Secrets.Backend {
	case "", "auto", "keychain", "file", "memory":
	default:
		errs = append(errs, fmt.Errorf("secrets.backend: %q is not one of auto, keychain, file, memory", cfg.Secrets.Backend))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (m MCPConfig) validate() []error {
	var errs []error
	if m.SessionIdleMinutes < 0 {
		errs = append(errs, fmt.Errorf("mcp.sessionIdleMinutes: must not be negative"))
	}
	if m.MaxSessionsPerUser < 0 {
		errs = append(errs, fmt.Errorf("mcp.maxSessionsPerUser: must not be negative"))
	}
	if m.MaxSessions < 0 {
		errs = append(errs, fmt.Errorf("mcp.maxSessions: must not be negative"))
	}
	if m.MaxOpenRequestsPerUser < 0 {
		errs = append(errs, fmt.Errorf("mcp.maxOpenRequestsPerUser: must not be negative"))
	}
	if m.MaxSessions > 0 && m.MaxSessionsPerUser > m.MaxSessions {
		errs = append(errs, fmt.Errorf("mcp.maxSessionsPerUser: %d is more than mcp.maxSessions (%d)", m.MaxSessionsPerUser, m.MaxSessions))
	}
	return errs
}

func (ec *ExtensionConfig) validate(name string) error {
	var errs []error
	if !extensionName.MatchString(name) {
		errs = append(errs, fmt.Errorf("extensions.%s: the name must match %s", name, extensionName))
	}
	if ec.Path == "" {
		errs = append(errs, fmt.Errorf("extensions.%s.path: required", name))
	}
	if ec.SHA256 != "" && !sha256Hex.MatchString(ec.SHA256) {
		errs = append(errs, fmt.Errorf("extensions.%s.sha256: want 64 hex digits", name))
	}
	for k, v := range ec.Env {
		if !envKey.MatchString(k) {
			errs = append(errs, fmt.Errorf("extensions.%s.env: %q is not a variable name", name, k))
		}
		if strings.ContainsRune(v, 0) {
			errs = append(errs, fmt.Errorf("extensions.%s.env.%s: contains a NUL byte", name, k))
		}
	}
	if len(ec.Config) > 0 {
		var v any
		if err := json.Unmarshal(ec.Config, &v); err != nil {
			errs = append(errs, fmt.Errorf("extensions.%s.config: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(data, se.Offset)
			return fmt.Errorf("invalid JSON at line %d, column %d: %w", line, col, err)
		}
		return errorf(err)
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the JSON object")
	}
	return nil
}

func errorf(err error) error {
	return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "json: "))
}

func position(data []byte, off int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < off && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// DataPathOf returns the data folder the operator's file at path names,
// reading only its dataDir: for reaching a running host whose file no
// longer parses (`agenthost reload` then shows the host's refusal).
func DataPathOf(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolving config path: %w", err)
	}
	return (&Config{DataDir: topString(data, "dataDir"), dir: filepath.Dir(abs)}).DataPath(), nil
}

// topString returns the string value of the top-level field key of the
// JSON object in data, read token by token so that it is found in a file
// that breaks after it; "" when not found.
func topString(data []byte, key string) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	depth, wantKey, last := 0, false, ""
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
			wantKey = depth == 1
		case string:
			if depth != 1 {
				continue
			}
			if wantKey {
				last, wantKey = v, false
				continue
			}
			if last == key {
				return v
			}
			wantKey = true
		default:
			if depth == 1 {
				wantKey = true
			}
		}
	}
}

// Resolve returns p resolved against the config file's folder.
func (c *Config) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) || c.dir == "" {
		return p
	}
	return filepath.Join(c.dir, p)
}

// DataPath returns the data folder, absolute when the file's folder is
// known.
func (c *Config) DataPath() string {
	d := c.DataDir
	if d == "" {
		d = ".agenthost"
	}
	return c.Resolve(d)
}

// CheckListen checks the HTTP surfaces' settings (listen, tls, publicURL,
// trustedProxies) as ParseConfig does: it refuses to serve tokens in clear
// text beyond loopback. For a Config built in Go rather than read from a file.
func (c *Config) CheckListen() error { return errors.Join(c.validateListen()...) }

// validateListen refuses to serve tokens in clear text beyond loopback.
func (c *Config) validateListen() []error {
	var errs []error
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, fmt.Errorf("tls: give both certFile and keyFile"))
	}
	listen := c.ListenAddr()
	hostPart, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return append(errs, fmt.Errorf("listen: %q is not host:port", listen))
	}
	ip := net.ParseIP(hostPart)
	loopback := hostPart == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && c.TLS.CertFile == "" {
		errs = append(errs, fmt.Errorf("listen: %q is reachable beyond this machine but tls is not configured: bearer tokens would cross the network in clear text; set tls.certFile and tls.keyFile, or listen on 127.0.0.1", listen))
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("publicURL: %q is not an http(s) URL", c.PublicURL))
		}
	}
	if _, err := guard.NewTrustedProxies(c.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("trustedProxies: %w", err))
	}
	return errs
}

// ListenAddr returns the address of the HTTP surfaces.
func (c *Config) ListenAddr() string {
	if c.Listen == "" {
		return DefaultListen
	}
	return c.Listen
}

// BaseURL returns the URL people and clients use to reach the host.
func (c *Config) BaseURL() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	scheme := "http"
	if c.TLS.CertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + c.ListenAddr()
}

// OAuthConfig configures the OAuth 2.1 authorization server in the host:
// apps that speak MCP authorization (Claude.ai and Claude Desktop custom
// connectors) connect to /mcp with the URL alone, and their user signs
// in on the settings page and allows them.
type OAuthConfig struct {
	// Enabled switches the authorization server on (default true). Off,
	// /mcp takes only the host's own bearer tokens.
	Enabled *bool `json:"enabled,omitempty"`
	// AccessTokenMinutes is an access token's life (default 60, 1 to
	// 1440).
	AccessTokenMinutes int `json:"accessTokenMinutes,omitempty"`
	// RefreshTokenDays is a refresh token's life (default 30, 1 to 365);
	// every refresh gives a new one.
	RefreshTokenDays int `json:"refreshTokenDays,omitempty"`
	// PassphraseHash is the bcrypt hash of a passphrase that lets whoever
	// knows it connect apps as PassphraseUser without the settings
	// sign-in: for a single-user install (`agenthost oauth
	// hash-passphrase` makes one). Never the passphrase itself.
	PassphraseHash string `json:"passphraseHash,omitempty"`
	// PassphraseUser is the user the passphrase stands for.
	PassphraseUser string `json:"passphraseUser,omitempty"`
	// AllowedRedirectHosts, when set, are the only hosts an app's https
	// redirect URI may name (such as "claude.ai"); loopback http redirect
	// URIs of native apps stay allowed.
	AllowedRedirectHosts []string `json:"allowedRedirectHosts,omitempty"`
}

// On reports whether the authorization server is enabled.
func (o OAuthConfig) On() bool { return o.Enabled == nil || *o.Enabled }

var (
	bcryptHash   = regexp.MustCompile(`^\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}$`)
	redirectHost = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
)

func (o OAuthConfig) validate() []error {
	var errs []error
	if o.AccessTokenMinutes < 0 || o.AccessTokenMinutes > 1440 {
		errs = append(errs, fmt.Errorf("oauth.accessTokenMinutes: %d is not between 1 and 1440", o.AccessTokenMinutes))
	}
	if o.RefreshTokenDays < 0 || o.RefreshTokenDays > 365 {
		errs = append(errs, fmt.Errorf("oauth.refreshTokenDays: %d is not between 1 and 365", o.RefreshTokenDays))
	}
	switch {
	case o.PassphraseHash != "" && !bcryptHash.MatchString(o.PassphraseHash):
		errs = append(errs, fmt.Errorf("oauth.passphraseHash: not a bcrypt hash ($2b$...); make one with `agenthost oauth hash-passphrase` (never put the passphrase itself in this file)"))
	case o.PassphraseHash != "" && o.PassphraseUser == "":
		errs = append(errs, fmt.Errorf("oauth.passphraseUser: required with oauth.passphraseHash: the user the passphrase stands for"))
	case o.PassphraseHash == "" && o.PassphraseUser != "":
		errs = append(errs, fmt.Errorf("oauth.passphraseHash: required with oauth.passphraseUser"))
	}
	if o.PassphraseUser != "" {
		if err := checkUser(o.PassphraseUser); err != nil {
			errs = append(errs, fmt.Errorf("oauth.passphraseUser: %w", err))
		}
	}
	for i, h := range o.AllowedRedirectHosts {
		if !redirectHost.MatchString(h) {
			errs = append(errs, fmt.Errorf("oauth.allowedRedirectHosts[%d]: %q is not a lowercase host name (no scheme, port or path)", i, h))
		}
	}
	return errs
}
