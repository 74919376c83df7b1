package ext

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/agenthost/agenthost/ext/internal/extpb"
	"github.com/agenthost/agenthost/ext/termsafe"
)

// ServiceExit is how a service process ended: its exit status and the
// last lines it wrote to stderr.
type ServiceExit struct {
	// Code is the exit code, or -1 when a signal ended the process.
	Code int
	// Signal names the signal that ended it ("killed"), or is "".
	Signal string
	// Stderr holds the last lines the process wrote to stderr (see
	// [StderrTail]), control characters escaped. They may hold secrets
	// the process was handed: redact them before showing them to anyone.
	Stderr []string
}

// Status says how the process ended: "exit status 3" or "signal killed".
func (e *ServiceExit) Status() string {
	if e.Signal != "" {
		return "signal " + e.Signal
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// ServiceExiter is implemented by service handles that can tell how their
// process ended (the host's, on either side of the wire).
type ServiceExiter interface {
	// Exit waits until the process has ended and its stderr was read,
	// then says how it ended; it returns ctx's error when ctx ends first,
	// and [ErrUnavailable] when the host cannot tell (the handle was
	// released, the connection ended).
	Exit(ctx context.Context) (*ServiceExit, error)
}

// The bounds of a [StderrTail].
const (
	StderrTailLines    = 20
	StderrTailBytes    = 4 << 10
	StderrTailLineMax  = 1 << 10
	stderrPendingLimit = StderrTailLineMax
)

// StderrTail keeps the last lines a process wrote to stderr: at most
// [StderrTailLines] lines and [StderrTailBytes] bytes in all (the oldest
// lines go first), each line cut at [StderrTailLineMax] bytes (a cut line
// ends with "…"), control characters escaped by [termsafe.String]. Its zero
// value is ready; it is safe for concurrent use.
type StderrTail struct {
	mu      sync.Mutex
	lines   []string
	size    int
	pending []byte // Write's unfinished line
}

// Add keeps one line (without its newline).
func (t *StderrTail) Add(line []byte) {
	s := strings.TrimRight(string(line), "\r\n")
	cut := false
	if len(s) > StderrTailLineMax {
		s, cut = s[:StderrTailLineMax], true
	}
	s = termsafe.String(s)
	if cut {
		s += "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	t.size += len(s)
	for len(t.lines) > StderrTailLines || (t.size > StderrTailBytes && len(t.lines) > 1) {
		t.size -= len(t.lines[0])
		t.lines = t.lines[1:]
	}
}

// Write keeps p's complete lines and holds an unfinished one for the next
// Write or [StderrTail.Lines]; it never fails. It lets a StderrTail be an
// [os/exec.Cmd]'s Stderr.
func (t *StderrTail) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		t.mu.Lock()
		if i < 0 {
			room := stderrPendingLimit + 1 - len(t.pending)
			if room > 0 {
				t.pending = append(t.pending, p[:min(room, len(p))]...)
			}
			t.mu.Unlock()
			break
		}
		line := append(t.pending, p[:i]...)
		t.pending = nil
		t.mu.Unlock()
		t.Add(line)
		p = p[i+1:]
	}
	return n, nil
}

// Lines returns the lines kept, oldest first, and an unfinished last line.
func (t *StderrTail) Lines() []string {
	t.mu.Lock()
	pending := t.pending
	t.pending = nil
	t.mu.Unlock()
	if len(pending) > 0 {
		t.Add(pending)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// exitBox holds a handle's [ServiceExit] once the host has told it.
type exitBox struct {
	once sync.Once
	done chan struct{}
	exit *ServiceExit // nil: the host could not tell
}

func newExitBox() *exitBox { return &exitBox{done: make(chan struct{})} }

// set records e (nil: unknown); only the first call counts.
func (b *exitBox) set(e *ServiceExit) {
	b.once.Do(func() {
		b.exit = e
		close(b.done)
	})
}

func (b *exitBox) wait(ctx context.Context) (*ServiceExit, error) {
	select {
	case <-b.done:
		if b.exit == nil {
			return nil, fmt.Errorf("the host did not say how the service process ended: %w", ErrUnavailable)
		}
		return b.exit, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func serviceExitToProto(e *ServiceExit) *extpb.ServiceExited {
	return &extpb.ServiceExited{Code: int32(e.Code), Signal: e.Signal, Stderr: e.Stderr}
}

func serviceExitFromProto(e *extpb.ServiceExited) *ServiceExit {
	return &ServiceExit{Code: int(e.GetCode()), Signal: e.GetSignal(), Stderr: e.GetStderr()}
}
