package extrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agenthost/agenthost/ext/cgroup"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// OutputTail is how much of a session's stdout and stderr (together, in
// order) the runner keeps: the last bytes.
const OutputTail = 64 << 10

// tokenMargin is how much longer than the time limit a session's token
// lives: the session revokes it at its end, the margin only covers the
// time between the kill and the revocation should the runner die there.
const tokenMargin = time.Minute

// How a session ended (Run.Ended).
const (
	EndedOK        = "ok"
	EndedTimeLimit = "killed at time limit"
	EndedCancelled = "cancelled"
	EndedFailed    = "failed to start"
)

// Run is one session's record, as the status shows it.
type Run struct {
	Trigger  string        `json:"trigger"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	// ExitCode is the agent's exit status (-1: none, e.g. killed).
	ExitCode int `json:"exitCode"`
	// Ended is ok, exit N, killed at time limit, cancelled, or failed to
	// start (with Error saying why).
	Ended string `json:"ended"`
	Error string `json:"error,omitempty"`
	// Uncontained says why the agent had no cgroup of its own (empty: it
	// had one): its kill then reached its process group only.
	Uncontained string `json:"uncontained,omitempty"`
	Output      string `json:"output,omitempty"`
}

// tail keeps the last max bytes written to it; safe for concurrent use
// (stdout and stderr write to one).
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}

// sessionSpec is everything one session needs, resolved.
type sessionSpec struct {
	runner    string
	user      string
	cfg       *Runner
	profile   *Profile
	publicURL string
}

// runSession runs one agent session to its end: mints its token, writes
// its folder and MCP config, starts the agent in its own process group,
// waits for it (killing the group at the time limit or when stop is
// done), and revokes the token whatever the end. It never returns before
// the agent's process group is gone.
func (e *Extension) runSession(stop context.Context, s *sessionSpec, out *tail) (run Run) {
	run = Run{Start: time.Now(), ExitCode: -1}
	defer func() { run.Duration = time.Since(run.Start).Round(time.Millisecond); run.Output = out.String() }()
	fail := func(err error) Run {
		run.Ended, run.Error = EndedFailed, err.Error()
		return run
	}
	if e.ua == nil {
		return fail(errors.New("the host grants this extension no UserActor (actAsUsers: true in its entry)"))
	}
	command, err := exec.LookPath(s.profile.Command)
	if err != nil {
		return fail(fmt.Errorf("the agent's command %q: %w", s.profile.Command, err))
	}
	dir, err := e.sessionDir(stop, s)
	if err != nil {
		return fail(fmt.Errorf("the session's folder: %w", err))
	}
	defer e.dropDir(dir)

	limit := s.cfg.timeLimit
	tok, err := e.mint(stop, s.user, "runner:"+s.runner, s.cfg.scope(), time.Now().Add(limit+tokenMargin))
	if err != nil {
		return fail(fmt.Errorf("minting the session's token: %w", err))
	}
	// The host's audit log records the revocation with how the session
	// ended (run is final here: the deferred call runs after return).
	defer func() {
		why := "session ended: " + run.Ended
		if run.Error != "" {
			why += ": " + run.Error
		}
		e.revoke(tok.ID, why)
	}()

	mcpURL := strings.TrimRight(s.publicURL, "/") + "/mcp"
	cfgPath := filepath.Join(dir, "mcp.json")
	vals := map[string]string{
		"prompt": s.cfg.Prompt, "mcpConfig": cfgPath, "mcpURL": mcpURL, "token": tok.Token,
		"allowedTools": s.profile.AllowedTools, "workdir": dir, "maxTurns": strconv.Itoa(s.profile.MaxTurns),
	}
	if err := os.WriteFile(cfgPath, []byte(expand(s.profile.MCPConfig, jsonVals(vals))), 0o600); err != nil {
		return fail(fmt.Errorf("writing the MCP config: %w", err))
	}
	env, err := e.agentEnv(stop, s, vals)
	if err != nil {
		return fail(err)
	}
	args := make([]string, len(s.profile.Args))
	for i, a := range s.profile.Args {
		args[i] = expand(a, vals)
	}
	if s.profile.Sandbox {
		if command, args, err = sandboxArgv(dir, command, args, s.profile.ReadablePaths); err != nil {
			return fail(err)
		}
	}
	cmd := exec.Command(command, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + s.profile.Path, "HOME=" + dir}, env...)
	cmd.Stdout, cmd.Stderr = out, out
	// The agent's own cgroup: the kill at its end reaches what left its
	// process group too.
	cgDir, cgFD := "", -1
	if e.cg == nil {
		run.Uncontained = e.cgErr.Error()
	} else {
		d, f, err := e.cg.Create(sessionCgroup(s.runner))
		if err != nil {
			run.Uncontained = err.Error()
			e.log.Warn("an agent session without its cgroup: a child that calls setsid survives the kill", "runner", s.runner, "err", err)
		} else {
			defer f.Close()
			cgDir, cgFD = d, int(f.Fd())
			defer func() {
				if err := cgroup.Remove(cgDir, 5*time.Second); err != nil {
					e.log.Warn("removing an agent session's cgroup", "err", err)
				}
			}()
		}
	}
	cmd.SysProcAttr = sysProcAttr(cgFD)
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("starting %s: %w", s.profile.Command, err))
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	timer := time.NewTimer(limit)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-done:
	case <-timer.C:
		run.Ended = EndedTimeLimit
		killGroup(pgid)
		cgroup.Kill(cgDir)
		werr = <-done
	case <-stop.Done():
		run.Ended = EndedCancelled
		killGroup(pgid)
		cgroup.Kill(cgDir)
		werr = <-done
	}
	// Whatever the agent left in its group or its cgroup goes with it.
	killGroup(pgid)
	cgroup.Kill(cgDir)
	if ps := cmd.ProcessState; ps != nil {
		run.ExitCode = ps.ExitCode()
	}
	if run.Ended == "" {
		var ee *exec.ExitError
		switch {
		case werr == nil:
			run.Ended = EndedOK
		case errors.As(werr, &ee) && ee.ExitCode() >= 0:
			run.Ended = "exit " + strconv.Itoa(ee.ExitCode())
		default:
			run.Ended = "killed: " + werr.Error()
		}
	}
	return run
}

// sessionDir makes the session's folder under its user's state folder of
// this extension (<data>/users/U/<ext>/state/sessions), first removing
// the folders there that no live session holds: what a crash left.
func (e *Extension) sessionDir(ctx context.Context, s *sessionSpec) (string, error) {
	p, err := e.host.UserStore(s.user).Paths(ctx)
	if err != nil {
		return "", err
	}
	parent := filepath.Join(p.State, "sessions")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", err
	}
	e.dirMu.Lock()
	defer e.dirMu.Unlock()
	ents, _ := os.ReadDir(parent)
	for _, d := range ents {
		if full := filepath.Join(parent, d.Name()); !e.dirs[full] {
			_ = os.RemoveAll(full)
		}
	}
	dir, err := os.MkdirTemp(parent, s.runner+"-")
	if err != nil {
		return "", err
	}
	e.dirs[dir] = true
	return dir, nil
}

// dropDir removes a session's folder.
func (e *Extension) dropDir(dir string) {
	e.dirMu.Lock()
	defer e.dirMu.Unlock()
	_ = os.RemoveAll(dir)
	delete(e.dirs, dir)
}

// jsonVals returns vals escaped for the inside of a JSON string, for the
// MCP config template.
func jsonVals(vals map[string]string) map[string]string {
	out := make(map[string]string, len(vals))
	for k, v := range vals {
		b, _ := json.Marshal(v) // a string always marshals
		out[k] = string(b[1 : len(b)-1])
	}
	return out
}

// agentEnv resolves the profile's variables for s's user (a value is a
// template over vals).
func (e *Extension) agentEnv(ctx context.Context, s *sessionSpec, vals map[string]string) ([]string, error) {
	var env []string
	for k, src := range s.profile.Env {
		var v string
		switch {
		case src.Value != "":
			v = expand(src.Value, vals)
		case src.Env != "":
			v = os.Getenv(src.Env)
		case src.OperatorSecret != "":
			sv, err := e.host.UserStore(ext.OperatorUser).Secrets().Get(ctx, src.OperatorSecret)
			if err != nil {
				return nil, fmt.Errorf("env %s: the operator's secret %q: %w", k, src.OperatorSecret, err)
			}
			v = sv
		case src.UserSecret != "":
			sv, err := e.host.UserStore(s.user).Secrets().Get(ctx, src.UserSecret)
			if err != nil {
				return nil, fmt.Errorf("env %s: %s's secret %q: %w", k, s.user, src.UserSecret, err)
			}
			v = sv
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// killGroup kills process group pgid (gone already: nothing).
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
