package extrunner

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/agenthost/agenthost/ext"
)

// Config is the extension's config block in the host's file.
type Config struct {
	// Profiles are the agent CLIs runners may start, by name. The
	// operator's alone: users choose among them, never write one.
	Profiles map[string]*Profile `json:"profiles"`
	// MaxProcesses caps agent processes of every runner and user together
	// (default 4); a session past it waits for a slot.
	MaxProcesses int `json:"maxProcesses,omitempty"`
	// Runners are the operator's runners, by name.
	Runners map[string]*Runner `json:"runners,omitempty"`
	// AllowUserRunners lets users declare runners for themselves in their
	// settings (section "runners"), choosing among Profiles.
	AllowUserRunners bool `json:"allowUserRunners,omitempty"`
}

// Profile is how to start one agent CLI and tell it its tools. Args,
// MCPConfig and Env's values are templates: {prompt}, {mcpConfig} (the
// path of the MCP config file), {mcpURL}, {token}, {allowedTools},
// {workdir} and {maxTurns} are replaced by the session's values, each as
// one whole argument's part (no shell ever sees them).
type Profile struct {
	// Command is the agent's executable (a path, or a name looked up in
	// PATH when the runner starts).
	Command string `json:"command"`
	// Args are the command's arguments (templates).
	Args []string `json:"args"`
	// MCPConfig is the MCP config file written into the session's folder
	// (0600) as {mcpConfig} (a template; default: Claude Code's format,
	// one "agenthost" http server with the token as a bearer header).
	MCPConfig string `json:"mcpConfig,omitempty"`
	// AllowedTools is what {allowedTools} becomes (default
	// "mcp__agenthost", Claude Code's name for every tool of the
	// "agenthost" server of the MCP config).
	AllowedTools string `json:"allowedTools,omitempty"`
	// MaxTurns is what {maxTurns} becomes (default 20).
	MaxTurns int `json:"maxTurns,omitempty"`
	// Env is the agent's environment beside PATH and HOME (the session's
	// folder): each variable's source. Nothing else of any process's
	// environment reaches the agent.
	Env map[string]EnvSource `json:"env,omitempty"`
	// Path is the agent's PATH (default /usr/local/bin:/usr/bin:/bin).
	Path string `json:"path,omitempty"`
	// Sandbox runs the agent in bubblewrap (Linux): the system folders,
	// ReadablePaths and its command read-only, its session's folder the
	// only writable place, its own pid namespace, the host's network. A
	// session fails to start where bwrap is missing.
	Sandbox bool `json:"sandbox,omitempty"`
	// ReadablePaths are more paths the sandboxed agent may read (its
	// installation, e.g. the folder of an npm package).
	ReadablePaths []string `json:"readablePaths,omitempty"`
}

// EnvSource is where one variable of the agent's environment comes from:
// exactly one of Value (a literal, not secret; a template, so that
// {"value": "{token}"} hands the agent its token in a variable), Env (a variable of this
// extension's own environment, which the operator sets in the extension's
// entry), OperatorSecret (a secret of the operator's for this extension:
// agenthost secret set --operator --ext runner NAME) or UserSecret (the
// runner's user's own secret for this extension).
type EnvSource struct {
	Value          string `json:"value,omitempty"`
	Env            string `json:"env,omitempty"`
	OperatorSecret string `json:"operatorSecret,omitempty"`
	UserSecret     string `json:"userSecret,omitempty"`
}

// Runner is one runner: who it acts as, what its sessions reach, how they
// start and what starts them.
type Runner struct {
	// User is the user the sessions act as (an operator's runner; a
	// user's own runner is always theirs).
	User string `json:"user,omitempty"`
	// Servers the session's token reaches (at least one), and of their
	// tools only those Tools globs name (path.Match over "server/tool";
	// none: all of them).
	Servers []string `json:"servers"`
	Tools   []string `json:"tools,omitempty"`
	// Profile names one of the operator's profiles.
	Profile string `json:"profile"`
	// Prompt is the agent's task.
	Prompt string `json:"prompt"`
	// TimeLimit bounds a session (a Go duration; default 30m, at most
	// 23h): the agent is killed then and its token dies with it.
	TimeLimit string `json:"timeLimit,omitempty"`
	// Concurrency is how many sessions may run at once (default 1).
	Concurrency int `json:"concurrency,omitempty"`
	// Schedule is a cron spec (five fields, or @hourly, @every 10m...).
	Schedule string `json:"schedule,omitempty"`
	// Resource, when set, starts a session whenever the resource changes
	// (notifications/resources/updated from the runner's subscription on
	// the host's /mcp, as the runner's user).
	Resource *ResourceTrigger `json:"resource,omitempty"`
	// Disabled keeps the runner declared but off.
	Disabled bool `json:"disabled,omitempty"`

	timeLimit time.Duration
	schedule  cron.Schedule
}

// ResourceTrigger names a resource of one of the user's servers.
type ResourceTrigger struct {
	Server string `json:"server"`
	URI    string `json:"uri"`
}

// Defaults.
const (
	DefaultMaxProcesses = 4
	DefaultTimeLimit    = 30 * time.Minute
	DefaultMaxTurns     = 20
	maxTimeLimit        = 23 * time.Hour
	defaultPath         = "/usr/local/bin:/usr/bin:/bin"
	// DefaultMCPConfig is Claude Code's --mcp-config format.
	DefaultMCPConfig    = `{"mcpServers":{"agenthost":{"type":"http","url":"{mcpURL}","headers":{"Authorization":"Bearer {token}"}}}}`
	defaultAllowedTools = "mcp__agenthost"
)

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseConfig reads the extension's config block. A broken profile or
// an error in the block itself fails; a broken runner does not: it comes
// back in bad (by runner name, the error naming the field), and the
// others run.
func ParseConfig(raw json.RawMessage) (cfg *Config, bad map[string]error, err error) {
	cfg = &Config{}
	if len(raw) > 0 && string(raw) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(cfg); err != nil {
			return nil, nil, fmt.Errorf("ext-runner config: %w", err)
		}
	}
	if cfg.MaxProcesses < 0 {
		return nil, nil, fmt.Errorf("ext-runner config: maxProcesses %d: want 0 (default %d) or more", cfg.MaxProcesses, DefaultMaxProcesses)
	}
	if cfg.MaxProcesses == 0 {
		cfg.MaxProcesses = DefaultMaxProcesses
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Profiles)) {
		if err := cfg.Profiles[name].check(); err != nil {
			errs = append(errs, fmt.Errorf("ext-runner config: profile %q: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	bad = map[string]error{}
	for name, r := range cfg.Runners {
		if err := checkName(name); err != nil {
			bad[name] = err
			continue
		}
		if r == nil {
			bad[name] = fmt.Errorf("runner %q: empty", name)
			continue
		}
		if err := r.check(cfg, true); err != nil {
			bad[name] = fmt.Errorf("runner %q: %w", name, err)
		}
	}
	return cfg, bad, nil
}

func checkName(name string) error {
	if name == "" || len(name) > 64 || strings.ContainsAny(name, "/ \t\n\x00") {
		return fmt.Errorf("runner name %q: want 1-64 characters without / or spaces", name)
	}
	return nil
}

func (p *Profile) check() error {
	if p == nil {
		return errors.New("empty")
	}
	if p.Command == "" {
		return errors.New("command: required")
	}
	if p.MaxTurns < 0 {
		return fmt.Errorf("maxTurns %d: want 0 (default %d) or more", p.MaxTurns, DefaultMaxTurns)
	}
	for _, a := range append(slices.Clone(p.Args), p.MCPConfig) {
		if err := checkTemplate(a); err != nil {
			return fmt.Errorf("args: %w", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		src := p.Env[k]
		if k == "" || strings.ContainsAny(k, "=\x00") || k == "PATH" || k == "HOME" {
			return fmt.Errorf("env %q: not a variable name this profile may set (PATH and HOME are the runner's)", k)
		}
		n := 0
		for _, s := range []string{src.Value, src.Env, src.OperatorSecret, src.UserSecret} {
			if s != "" {
				n++
			}
		}
		if err := checkTemplate(src.Value); err != nil {
			return fmt.Errorf("env %q: %w", k, err)
		}
		if n != 1 {
			return fmt.Errorf("env %q: want exactly one of value, env, operatorSecret, userSecret", k)
		}
	}
	for _, r := range p.ReadablePaths {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("readablePaths: %q is not an absolute path", r)
		}
	}
	if p.MCPConfig == "" {
		p.MCPConfig = DefaultMCPConfig
	}
	if p.AllowedTools == "" {
		p.AllowedTools = defaultAllowedTools
	}
	if p.MaxTurns == 0 {
		p.MaxTurns = DefaultMaxTurns
	}
	if p.Path == "" {
		p.Path = defaultPath
	}
	return nil
}

// placeholders are the names a template may use.
var placeholders = []string{"prompt", "mcpConfig", "mcpURL", "token", "allowedTools", "workdir", "maxTurns"}

// checkTemplate refuses a template naming an unknown placeholder.
func checkTemplate(s string) error {
	for rest := s; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return nil
		}
		rest = rest[i+1:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return nil
		}
		name := rest[:j]
		if isIdent(name) && !slices.Contains(placeholders, name) {
			return fmt.Errorf("%q: unknown placeholder {%s} (known: {%s})", s, name, strings.Join(placeholders, "} {"))
		}
	}
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// expand replaces the placeholders of a template with vals; anything else
// in braces (JSON, say) stays as written.
func expand(tmpl string, vals map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		name := tmpl[i+1 : i+j]
		if v, ok := vals[name]; ok && isIdent(name) {
			b.WriteString(tmpl[:i])
			b.WriteString(v)
			tmpl = tmpl[i+j+1:]
			continue
		}
		b.WriteString(tmpl[:i+1])
		tmpl = tmpl[i+1:]
	}
}

// check validates a runner against cfg's profiles; operator says whether
// the operator declared it (then User is required).
func (r *Runner) check(cfg *Config, operator bool) error {
	if operator && r.User == "" {
		return errors.New("user: required (the user the sessions act as)")
	}
	if r.User == ext.OperatorUser || strings.ContainsAny(r.User, "/\x00") {
		return fmt.Errorf("user %q: not a user", r.User)
	}
	sc := &ext.Scope{Servers: slices.Clone(r.Servers), Tools: slices.Clone(r.Tools)}
	if err := sc.Validate(); err != nil {
		return fmt.Errorf("servers/tools: %w", err)
	}
	if r.Profile == "" {
		return errors.New("profile: required")
	}
	if cfg.Profiles[r.Profile] == nil {
		return fmt.Errorf("profile %q: no such profile (the operator's: %s)", r.Profile, strings.Join(slices.Sorted(maps.Keys(cfg.Profiles)), ", "))
	}
	if strings.TrimSpace(r.Prompt) == "" {
		return errors.New("prompt: required")
	}
	r.timeLimit = DefaultTimeLimit
	if r.TimeLimit != "" {
		d, err := time.ParseDuration(r.TimeLimit)
		if err != nil || d <= 0 || d > maxTimeLimit {
			return fmt.Errorf("timeLimit %q: want a Go duration between 1s and %v, such as 30m", r.TimeLimit, maxTimeLimit)
		}
		r.timeLimit = d
	}
	if r.Concurrency < 0 || r.Concurrency > 64 {
		return fmt.Errorf("concurrency %d: want 1 to 64 (0: 1)", r.Concurrency)
	}
	if r.Concurrency == 0 {
		r.Concurrency = 1
	}
	if r.Schedule != "" {
		s, err := cronParser.Parse(r.Schedule)
		if err != nil {
			return fmt.Errorf("schedule %q: %w", r.Schedule, err)
		}
		r.schedule = s
	}
	if rt := r.Resource; rt != nil {
		if rt.URI == "" || rt.Server == "" {
			return errors.New("resource: want both server and uri")
		}
		if !slices.Contains(r.Servers, rt.Server) {
			return fmt.Errorf("resource: server %q is not one of the runner's servers %v", rt.Server, r.Servers)
		}
	}
	return nil
}

// scope is the runner's sessions' scope.
func (r *Runner) scope() *ext.Scope {
	sc := &ext.Scope{Servers: slices.Clone(r.Servers), Tools: slices.Clone(r.Tools)}
	_ = sc.Validate()
	return sc
}
