package extmcp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/ext"
)

// Per-user placeholders. An operator's server is one config for many
// users; a stateful server (a memory graph in a file, a database) given one
// fixed path would share its state between them. These placeholders, in a
// stdio server's args, env values and cwd and in a remote server's header
// values, are replaced for each user when the process is started or the
// request sent:
//
//	${user}     the user's id (letters, digits and . _ @ + - only: the host's validUser)
//	${userDir}  the user's own folder: the process's HOME (see userDir)
//
// "$${" is a literal "${". Any other ${...} is a load error naming the
// field. ${userDir} is refused in headers: it names a folder of this
// machine, of no use to a remote server.
const (
	phUser    = "user"
	phUserDir = "userDir"
)

// checkPlaceholders reports the unknown or unterminated placeholders of v.
// secret values (env, headers) are never quoted.
func checkPlaceholders(v, where string, remote, secret bool, errs *problems) {
	for rest := v; ; {
		i := strings.Index(rest, "${")
		if i < 0 {
			return
		}
		if i > 0 && rest[i-1] == '$' {
			rest = rest[i+2:]
			continue
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			errs.add(where, "has a ${ without its closing }; write $${ for a literal ${")
			return
		}
		name := rest[i+2 : i+j]
		switch {
		case name == phUser:
		case name == phUserDir && remote:
			errs.add(where, "${userDir} names a folder of this machine: it applies to stdio servers only")
		case name == phUserDir:
		case secret:
			errs.add(where, "has an unknown placeholder: the placeholders are ${user} and ${userDir} ($${ is a literal ${)")
		default:
			errs.add(where, "unknown placeholder ${%s}: the placeholders are ${user} and ${userDir} ($${ is a literal ${)", clip(name, 20))
		}
		rest = rest[i+j+1:]
	}
}

// expand replaces the placeholders of a validated value.
func expand(v, user, dir string) string {
	if !strings.Contains(v, "${") {
		return v
	}
	var b strings.Builder
	for {
		i := strings.Index(v, "${")
		if i < 0 {
			b.WriteString(v)
			return b.String()
		}
		if i > 0 && v[i-1] == '$' {
			b.WriteString(v[:i-1] + "${")
			v = v[i+2:]
			continue
		}
		b.WriteString(v[:i])
		j := strings.IndexByte(v[i:], '}')
		if j < 0 { // validated away; kept as written
			b.WriteString(v[i:])
			return b.String()
		}
		switch v[i+2 : i+j] {
		case phUser:
			b.WriteString(user)
		case phUserDir:
			b.WriteString(dir)
		default:
			b.WriteString(v[i : i+j+1])
		}
		v = v[i+j+1:]
	}
}

// perUser reports whether a stdio server's args, env or cwd name a
// placeholder, so that each user's process gets values of its own.
func perUser(s Server) bool { return names(s, "${user}") || names(s, "${"+phUserDir+"}") }

// usesUserDir reports whether a stdio server's args, env or cwd name
// ${userDir}.
func usesUserDir(s Server) bool { return names(s, "${"+phUserDir+"}") }

// names reports whether a stdio server's args, env or cwd hold the
// placeholder ph (not escaped as $${).
func names(s Server, ph string) bool {
	has := func(v string) bool { return strings.Contains(strings.ReplaceAll(v, "$${", ""), ph) }
	return has(s.Cwd) || slices.ContainsFunc(s.Args, has) || slices.ContainsFunc(slices.Collect(maps.Values(s.Env)), has)
}

// userDir returns the user's own folder for a process: its HOME. An
// unsandboxed process's HOME is the user's data folder for this extension
// (ext.Paths.Data); a sandboxed one's is the "sandbox" folder beside it,
// the only folder of the user's the sandbox shows (the host's
// services.SandboxOptions.Home in host/host.go). Both are the user's alone
// (0700, created on demand).
func userDir(ctx context.Context, h ext.Host, user string, sandboxed bool) (string, error) {
	p, err := h.UserStore(user).Paths(ctx)
	if err != nil {
		return "", fmt.Errorf("the folder of user %q: %w", user, err)
	}
	if sandboxed {
		return filepath.Join(filepath.Dir(p.Data), "sandbox"), nil
	}
	return p.Data, nil
}

// fixedPaths returns the args and env values of an operator's stdio server
// that look like one file every user's process would write: an absolute
// path (alone, or after "--flag=") that is not a folder, and that either
// is a writable file or would be created in a writable folder. Paths under
// the command's folder and readablePaths are left out (programs and data
// to read). The heuristic keeps false positives low: a folder (a root to
// serve), a missing folder's file and read-only files (no write bit) are
// not named.
func fixedPaths(s Server, command string) []string {
	var out []string
	look := func(where, v string) {
		if _, after, ok := strings.Cut(v, "="); ok && strings.HasPrefix(v, "-") {
			v = after
		}
		if !filepath.IsAbs(v) || strings.Contains(v, "${") || strings.ContainsAny(v, "\n:;,") {
			return
		}
		v = filepath.Clean(v)
		if v == command || under(v, filepath.Dir(command)) {
			return
		}
		for _, r := range s.ReadablePaths {
			if under(v, r) {
				return
			}
		}
		// Writable is judged by the mode's write bits (portable; the
		// process's uid may not be ours anyway).
		if fi, err := os.Stat(v); err == nil {
			if fi.IsDir() || fi.Mode().Perm()&0o222 == 0 {
				return
			}
		} else if fi, err := os.Stat(filepath.Dir(v)); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o222 == 0 {
			return
		}
		out = append(out, where)
	}
	for i, a := range s.Args {
		look(fmt.Sprintf("args[%d]", i), a)
	}
	for _, k := range sortedKeys(s.Env) {
		look("env."+k, s.Env[k])
	}
	return out
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	dir = filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// checkCommand reports a stdio server's command that the host could not
// run: resolved as the process spec resolves it (relative to base, the
// operator's file's folder, when it has a separator; else looked up on
// PATH), it must exist and be an executable file. A sandboxed server runs
// the same file, which the sandbox shows read-only.
func checkCommand(command, base, where string, errs *problems) {
	p := command
	if base != "" && !filepath.IsAbs(p) && strings.ContainsAny(p, `/`+string(filepath.Separator)) {
		p = filepath.Join(base, p)
	}
	if _, err := exec.LookPath(p); err != nil {
		switch {
		case errors.Is(err, exec.ErrNotFound) && !strings.ContainsAny(command, `/`+string(filepath.Separator)):
			errs.add(where+".command", "%q not found on PATH", clip(command, 80))
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
			errs.add(where+".command", "%q not found (resolved to %s)", clip(command, 80), clip(p, 120))
		case errors.Is(err, fs.ErrPermission):
			errs.add(where+".command", "%q is not executable", clip(command, 80))
		default:
			errs.add(where+".command", "%q cannot be run: %v", clip(command, 80), err)
		}
	}
}

// checkCommands checks the commands of the operator's stdio servers that
// are not switched off (see checkCommand).
func (c *Config) checkCommands(base string, errs *problems) {
	for key, m := range map[string]map[string]Server{"mcpServers": c.MCPServers, "servers": c.Servers} {
		for _, name := range sortedKeys(m) {
			if s := m[name]; s.Command != "" && (s.Enabled == nil || *s.Enabled) {
				checkCommand(s.Command, base, key+"."+name, errs)
			}
		}
	}
}

// warnSharedPaths logs, at load, each operator's stdio server that several
// users run and whose args or env name one fixed writable file (see
// fixedPaths) without a per-user placeholder: every user's process would
// read and write the same file. Only the fields are named, not their
// values (an env value may be a secret).
func (x *Extension) warnSharedPaths(cfg *Config, base string) {
	cfg.each(func(name string, s Server) {
		if s.Command == "" || (s.Enabled != nil && !*s.Enabled) || perUser(s) {
			return
		}
		if s.Credentials == "shared" && len(s.Users) < 2 {
			return // one user: nothing to share
		}
		command := s.Command
		if base != "" && !filepath.IsAbs(command) && strings.ContainsAny(command, `/`+string(filepath.Separator)) {
			command = filepath.Join(base, command)
		}
		if fields := fixedPaths(s, filepath.Clean(command)); len(fields) > 0 {
			x.log.Warn("extmcp: a stdio server several users run names one fixed writable path: each user's process would read and write the same file, "+
				"so one user could see another's data; put ${userDir} (each user's own folder) or ${user} in the path",
				"server", name, "fields", strings.Join(fields, ", "))
		}
	})
}
