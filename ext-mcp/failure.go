package extmcp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/termsafe"
)

// Why a stdio server's process failed is told in one plain sentence, with
// what it wrote:
//
//   - the command could not start: <the system's reason>
//   - it exited with status 3 before answering: <its last stderr lines>
//   - it answered something that is not MCP: <the start of that line>
//
// Every secret the process was handed is redacted from what it wrote
// ([outputRedactor]), and a shared server's output (its process holds the
// operator's credential) is in the operator's status only, unless the
// operator set showOutputToUsers: its users read the sentence alone. The
// raw error chain goes to the log.

// exitWait bounds how long a failure waits for the host to say how the
// process ended (it reaps it and reads the rest of its stderr first).
const exitWait = 2 * time.Second

// Bounds of what a reason shows of a process's output.
const (
	reasonLines   = 5
	reasonBytes   = 1 << 10
	notMCPHeadMax = 120
)

// notMCPError is a line from a stdio server that is not MCP JSON-RPC;
// head is its start, escaped ([termsafe.String]).
type notMCPError struct {
	head string
	err  error
}

func (e *notMCPError) Error() string {
	return "the server wrote something that is not MCP JSON-RPC (a banner or log line on stdout?): " + e.err.Error()
}

func (e *notMCPError) Unwrap() error { return e.err }

func newNotMCPError(line []byte, err error) *notMCPError {
	cut := len(line) > notMCPHeadMax
	if cut {
		line = line[:notMCPHeadMax]
	}
	head := termsafe.String(strings.TrimRight(string(line), "\r\n"))
	if cut {
		head += "…"
	}
	return &notMCPError{head: head, err: err}
}

// outputRedactor removes from a process's output every secret the host
// handed it: the credential (MCP_ACCESS_TOKEN, the operator's on a shared
// server) whatever its length, and every other environment value of at
// least minEnvSecret bytes (the config's env may hold a key; shorter
// values are settings such as "1" or "debug", and redacting them would
// garble every line). Each is matched as written and as [termsafe.String]
// writes it. A line that was cut ("…" at its end) may end with the start
// of a secret: a tail of at least minPartial bytes that begins one is
// redacted too (fewer bytes tell next to nothing of a secret, and would
// match ordinary text).
type outputRedactor struct {
	secrets []string // longest first
}

const (
	minEnvSecret = 8
	minPartial   = 4
)

func newOutputRedactor(spec *ext.ProcessSpec, handed ...string) *outputRedactor {
	var secrets []string
	add := func(v string) {
		if v == "" {
			return
		}
		secrets = append(secrets, v)
		if e := termsafe.String(v); e != v {
			secrets = append(secrets, e)
		}
	}
	for _, v := range handed {
		add(v)
	}
	if spec != nil {
		for _, kv := range spec.Env {
			if _, v, _ := strings.Cut(kv, "="); len(v) >= minEnvSecret {
				add(v)
			}
		}
	}
	// The longest first: a secret that contains another goes whole.
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return &outputRedactor{secrets: secrets}
}

// line redacts one line of output.
func (r *outputRedactor) line(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	body, cut := strings.CutSuffix(s, "…")
	if !cut {
		return s
	}
	for _, sec := range r.secrets {
		for k := min(len(sec)-1, len(body)); k >= minPartial; k-- {
			if strings.HasSuffix(body, sec[:k]) {
				return body[:len(body)-k] + "[redacted]…"
			}
		}
	}
	return s
}

// lines redacts the last lines of output and joins them for a reason:
// at most reasonLines lines and reasonBytes bytes (older lines go first).
func (r *outputRedactor) lines(in []string) string {
	var out []string
	size := 0
	for i := len(in) - 1; i >= 0 && len(out) < reasonLines; i-- {
		l := strings.TrimSpace(r.line(in[i]))
		if l == "" {
			continue
		}
		if size+len(l) > reasonBytes && len(out) > 0 {
			break
		}
		size += len(l)
		out = append(out, l)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return strings.Join(out, " | ")
}

// startFailure says why a stdio server's process could not be started,
// when the command itself could not (err is ext.ErrCannotStart); else nil.
func (c *conn) startFailure(command string, err error) error {
	if !errors.Is(err, ext.ErrCannotStart) {
		return nil
	}
	why := err.Error()
	if _, after, ok := strings.Cut(why, command+"): "); ok {
		why = after // the host's own prefix names the service and user
	}
	return fmt.Errorf("the command could not start: %s", c.output.line(termsafe.String(why)))
}

// processFailure says in one plain sentence why a stdio server's process
// failed, from what its stdout brought (c.stdio's end) and how it exited,
// or nil when neither tells. before says it failed before answering (while
// connecting). A shared server's output is for the operator only
// ([catalog.OperatorOnlyError]) unless the operator lets its users see it.
// It waits at most exitWait for the end of the process's stdout and for
// the host to say how the process ended.
func (c *conn) processFailure(before bool) error {
	if c.stdio == nil {
		return nil
	}
	// A write to a process that exited may fail before its stdout's end
	// is read: wait (bounded) for that end.
	ctx, cancel := context.WithTimeout(context.Background(), exitWait)
	defer cancel()
	select {
	case <-c.stdio.done:
	case <-ctx.Done():
		return nil // the process still runs: not its failure
	}
	var (
		sentence, detail string
		nm               *notMCPError
	)
	switch {
	case errors.As(c.stdio.err, &nm):
		sentence, detail = "it answered something that is not MCP", c.output.line(nm.head)
	case errors.Is(c.stdio.err, io.EOF):
		ex, ok := c.svc.(ext.ServiceExiter)
		if !ok {
			return nil
		}
		e, err := ex.Exit(ctx)
		if err != nil {
			return nil
		}
		if why, ok := sandboxExecFailure(e); ok {
			// The sandbox ran, the command in it could not.
			return fmt.Errorf("the command could not start: %s", c.output.line(why))
		}
		sentence = fmt.Sprintf("it exited with status %d", e.Code)
		if e.Signal != "" {
			sentence = "it was ended by signal " + e.Signal
		}
		if before {
			sentence += " before answering"
		}
		detail = c.output.lines(e.Stderr)
	default:
		return nil
	}
	full := sentence
	if detail != "" {
		full += ": " + detail
	}
	if c.operatorsOutput && detail != "" {
		return &catalog.OperatorOnlyError{User: sentence + " (what it wrote is shown to the operator only)", Operator: full}
	}
	return errors.New(full)
}

// sandboxExecFailure reports whether the sandbox (bubblewrap) could not
// run the command, and why: bwrap's last word "bwrap: execvp CMD: why"
// and status 1.
func sandboxExecFailure(e *ext.ServiceExit) (string, bool) {
	if e.Code != 1 || len(e.Stderr) == 0 {
		return "", false
	}
	why, ok := strings.CutPrefix(e.Stderr[len(e.Stderr)-1], "bwrap: execvp ")
	return why, ok
}
