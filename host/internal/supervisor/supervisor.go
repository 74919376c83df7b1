package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/agenthost/agenthost/ext"
)

// ErrChecksum is returned when an extension binary does not match its pin.
var ErrChecksum = errors.New("checksum mismatch")

// Spec says how to launch one extension.
type Spec struct {
	// Name is the extension's name in the operator's file.
	Name string
	// Path is the binary, absolute.
	Path string
	Args []string
	// Env holds explicit KEY=VALUE entries from the config.
	Env []string
	// SHA256, when set, pins the binary (lowercase or uppercase hex).
	SHA256 string
	// Home is the extension's HOME folder.
	Home string
	// DisableAutoMTLS turns off go-plugin's mutual TLS (tests, benchmarks).
	DisableAutoMTLS bool
	// FDPassing hands the extension a descriptor channel so service stdio
	// passes as descriptors instead of relayed bytes.
	FDPassing bool
	// DisableCallChannel sends calls over a gRPC stream instead of the
	// socketpair call channel (tests of both carriers).
	DisableCallChannel bool
	// StartTimeout bounds the launch (default 30s).
	StartTimeout time.Duration
}

// allowedHostEnv are the only host variables an extension inherits.
var allowedHostEnv = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

// Instance is one running extension process.
type Instance struct {
	Client *ext.Client
	pc     *plugin.Client
	pid    int
}

// Done is closed when the process has exited.
func (i *Instance) Done() <-chan struct{} { return i.Client.Done() }

// PID returns the process ID.
func (i *Instance) PID() int { return i.pid }

// Kill stops the process (graceful close, then a kill after 2 s) and waits
// for go-plugin's goroutines. It is idempotent.
func (i *Instance) Kill() { i.pc.Kill() }

// Launch starts an extension and connects to it. On error nothing is left
// running.
func Launch(ctx context.Context, spec Spec, logger *slog.Logger) (*Instance, error) {
	bin, err := os.Open(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("opening extension binary: %w", err)
	}
	// The child execs this descriptor; once it runs, our copy can go.
	defer bin.Close()
	if spec.SHA256 != "" {
		h := sha256.New()
		if _, err := io.Copy(h, bin); err != nil {
			return nil, fmt.Errorf("hashing extension binary %s: %w", spec.Path, err)
		}
		got := hex.EncodeToString(h.Sum(nil))
		if !strings.EqualFold(got, spec.SHA256) {
			return nil, fmt.Errorf("extension binary %s has sha256 %s but the config pins %s; refusing to start it: %w",
				spec.Path, got, strings.ToLower(spec.SHA256), ErrChecksum)
		}
	}
	var (
		clientOpts ext.ClientOptions
		extEnd     *os.File // descriptor channel, fd 3 in the child
		callEnd    *os.File // call channel, fd 4 (or 3) in the child
	)
	if spec.FDPassing {
		hostEnd, e, err := ext.NewFDChannel()
		if err != nil {
			logger.Warn("descriptor passing unavailable; service bytes will be relayed", "extension", spec.Name, "error", err)
		} else {
			clientOpts.FDChannel = hostEnd
			extEnd = e
		}
	}
	if !spec.DisableCallChannel {
		hostEnd, e, err := ext.NewCallChannel()
		if err != nil {
			logger.Warn("call channel unavailable; calls will travel over gRPC", "extension", spec.Name, "error", err)
		} else {
			clientOpts.CallChannel = hostEnd
			callEnd = e
		}
	}
	closeEnds := func() {
		for _, f := range []*os.File{extEnd, callEnd} {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	plugins, err := ext.HostPlugins(&clientOpts)
	if err != nil {
		closeEnds()
		return nil, err
	}
	timeout := spec.StartTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	elog := logger.With("extension", spec.Name)
	var pid int
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  ext.Handshake,
		Plugins:          plugins,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         !spec.DisableAutoMTLS,
		SkipHostEnv:      true,
		StartTimeout:     timeout,
		Logger:           newHCLog(elog),
		SyncStdout:       logWriter(elog, "stdout"),
		SyncStderr:       logWriter(elog, "stderr"),
		RunnerFunc: func(_ hclog.Logger, pcmd *exec.Cmd, _ string) (runner.Runner, error) {
			cmd := exec.Command(execPath(bin), spec.Args...)
			cmd.Args[0] = spec.Path
			// Extra files are numbered from 3 in the child.
			var extra []string
			if extEnd != nil {
				cmd.ExtraFiles = append(cmd.ExtraFiles, extEnd)
				extra = append(extra, fmt.Sprintf("%s=%d", ext.EnvFDChannel, 2+len(cmd.ExtraFiles)))
			}
			if callEnd != nil {
				cmd.ExtraFiles = append(cmd.ExtraFiles, callEnd)
				extra = append(extra, fmt.Sprintf("%s=%d", ext.EnvCallChannel, 2+len(cmd.ExtraFiles)))
			}
			cmd.Env = buildEnv(spec, pcmd.Env, extra)
			cmd.Dir = filepath.Dir(spec.Path)
			cmd.SysProcAttr = childAttrs()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				return nil, err
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				return nil, err
			}
			r := &procRunner{cmd: cmd, name: spec.Name, stdout: stdout, stderr: stderr}
			r.closeAfterStart = append(r.closeAfterStart, cmd.ExtraFiles...)
			return &pidRunner{procRunner: r, pid: &pid}, nil
		},
	})
	type result struct {
		rpc plugin.ClientProtocol
		err error
	}
	ch := make(chan result, 1)
	go func() {
		rpc, err := pc.Client()
		ch <- result{rpc, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		pc.Kill()
		<-ch
		return nil, fmt.Errorf("launching extension %q: %w", spec.Name, ctx.Err())
	}
	if res.err != nil {
		pc.Kill()
		return nil, fmt.Errorf("launching extension %q from %s: %w", spec.Name, spec.Path, res.err)
	}
	c, err := ext.Dispense(res.rpc)
	if err != nil {
		pc.Kill()
		return nil, fmt.Errorf("launching extension %q: %w", spec.Name, err)
	}
	return &Instance{Client: c, pc: pc, pid: pid}, nil
}

// pidRunner records the pid once the process starts.
type pidRunner struct {
	*procRunner
	pid *int
}

func (r *pidRunner) Start(ctx context.Context) error {
	if err := r.procRunner.Start(ctx); err != nil {
		return err
	}
	*r.pid = r.procRunner.pid
	return nil
}

func buildEnv(spec Spec, pluginEnv, channels []string) []string {
	env := make([]string, 0, len(allowedHostEnv)+len(spec.Env)+len(pluginEnv)+2)
	for _, k := range allowedHostEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if spec.Home != "" {
		env = append(env, "HOME="+spec.Home)
	}
	env = append(env, spec.Env...)
	env = append(env, channels...)
	// go-plugin's own variables (cookie, AutoMTLS certificate) come last so
	// nothing in the config can override them.
	return append(env, pluginEnv...)
}

// logWriter turns raw lines an extension writes to stdout or stderr after
// Serve into log records.
func logWriter(l *slog.Logger, stream string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
			if line != "" {
				l.Info(line, "stream", stream)
			}
		}
		return len(p), nil
	})
}
