package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"

	"github.com/hashicorp/go-plugin/runner"
)

// procRunner is our go-plugin runner: we own the exec.Cmd, so the child gets
// exactly the environment we choose, no stdin (go-plugin's default runner
// hands it the host's), the descriptor channel as an extra file, and dies
// with the host (Pdeathsig, Linux).
type procRunner struct {
	cmd    *exec.Cmd
	name   string
	stdout io.ReadCloser
	stderr io.ReadCloser
	// closeAfterStart are the parent's copies of files handed to the child.
	closeAfterStart []*os.File
	pid             int
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) Start(context.Context) error {
	err := r.cmd.Start()
	for _, f := range r.closeAfterStart {
		_ = f.Close()
	}
	r.closeAfterStart = nil
	if err != nil {
		return fmt.Errorf("starting %s: %w", r.name, err)
	}
	r.pid = r.cmd.Process.Pid
	return nil
}

func (r *procRunner) Diagnose(context.Context) string {
	return "the extension binary may be for another platform, missing, not executable, or not an agenthost extension (it must call ext.Serve)"
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.name }
func (r *procRunner) ID() string {
	if r.pid == 0 {
		return ""
	}
	return strconv.Itoa(r.pid)
}

func (r *procRunner) Wait(context.Context) error { return r.cmd.Wait() }

func (r *procRunner) Kill(context.Context) error {
	if r.cmd.Process == nil {
		return nil
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
