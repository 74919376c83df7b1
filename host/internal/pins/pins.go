// Package pins keeps the host's tool pins (README "Tool pinning"), the
// defence against a server that quietly changes what a tool says it does
// (a rug pull): the first definitions of a server's tools a user sees are
// the baseline; a tool whose definition (name, title, description, input
// and output schemas, annotations; hashed as canonical JSON) differs from
// its baseline, or that is new, is pending until approved. Under
// [ext.PinBlock] a pending tool is held back (neither listed nor
// callable); under [ext.PinWarn] it works and is flagged.
//
// Baselines are kept per user and server: a server with per-user
// credentials may rightly list different tools to different users. A
// user's first sight of an operator's server is their baseline only for
// the tools no other user has; a tool others have must match one of
// their baselines, or it is a change. The
// operator approves the changes of the operator's servers (once for every
// user who saw the same change: a later user who sees it is not asked
// again); a user approves their own servers' changes.
//
// A [Manager] is safe for concurrent use: it serializes its checks and
// approvals (one mutex), so a check never sees half an approval. The
// [Store] it uses is SQLite (pins.db in the data folder, [OpenSQLite]).
package pins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/agenthost/agenthost/ext"
)

// Row is one tool's pin for one user: its approved baseline (Hash and Def;
// empty for a tool first seen after the baseline, never approved) and the
// pending definition that differs from it (PendingHash, PendingDef; empty
// when none).
type Row struct {
	User   string `json:"user"`
	Server string `json:"server"`
	// Tool is the host's full name, "server/tool".
	Tool       string `json:"tool"`
	ByOperator bool   `json:"byOperator"`
	// Mode is the tool's pin mode when last seen.
	Mode         ext.PinMode `json:"mode"`
	Hash         string      `json:"hash,omitempty"`
	Def          string      `json:"def,omitempty"`
	ApprovedAt   time.Time   `json:"approvedAt,omitzero"`
	ApprovedBy   string      `json:"approvedBy,omitempty"`
	PendingHash  string      `json:"pendingHash,omitempty"`
	PendingDef   string      `json:"pendingDef,omitempty"`
	PendingSince time.Time   `json:"pendingSince,omitzero"`
}

// Pending reports whether the row waits for an approval.
func (r Row) Pending() bool { return r.PendingHash != "" }

// Change says what kind of change a pending row is: "new" (no baseline)
// or "changed".
func (r Row) Change() string {
	if r.Hash == "" {
		return "new"
	}
	return "changed"
}

// Diff is the unified diff of the row's baseline and pending definitions
// (pretty JSON); all lines added for a new tool.
func (r Row) Diff() string {
	d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(pretty(r.Def)), B: difflib.SplitLines(pretty(r.PendingDef)),
		FromFile: "approved " + short(r.Hash), ToFile: "pending " + short(r.PendingHash), Context: 3,
	})
	return d
}

func short(h string) string {
	if h == "" {
		return "(none)"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// pretty indents canonical JSON; "" stays "".
func pretty(def string) string {
	if def == "" {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, []byte(def), "", "  ") != nil {
		return def + "\n"
	}
	b.WriteByte('\n')
	return b.String()
}

// Pretty is the row's definition d (Def or PendingDef) as indented JSON.
func Pretty(d string) string { return pretty(d) }

// Filter selects rows.
type Filter struct {
	// User limits the rows to one user's; "" is every user's.
	User string
	// Server and Tool (full name) limit them to one server, one tool.
	Server, Tool string
	// PendingOnly keeps the rows that wait for an approval.
	PendingOnly bool
}

// Store keeps the rows. Implementations are safe for concurrent use.
type Store interface {
	// Rows returns the rows f selects, by user, server and tool.
	Rows(ctx context.Context, f Filter) ([]Row, error)
	// Put inserts or replaces rows (keyed by user and tool) in one
	// transaction.
	Put(ctx context.Context, rows []Row) error
	// ApprovedByOperator reports whether the operator approved hash for
	// tool for any user.
	ApprovedByOperator(ctx context.Context, tool, hash string) (bool, error)
	Close() error
}

// ErrNothingPending is returned by an approval that finds nothing to
// approve.
var ErrNothingPending = errors.New("nothing pending")

// Def is the pinned part of a tool's definition.
type Def struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
}

// Canonical returns the tool's pinned definition as canonical JSON: the
// fields above, each JSON value with its object keys sorted, no
// insignificant whitespace, numbers as written.
func Canonical(t ext.Tool) string {
	d := Def{Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: canon(t.InputSchema), OutputSchema: canon(t.OutputSchema), Annotations: canon(t.Annotations)}
	b, _ := json.Marshal(d) // fields are valid JSON or nil: cannot fail
	return string(b)
}

// Hash is the SHA-256 (hex) of [Canonical].
func Hash(t ext.Tool) string {
	sum := sha256.Sum256([]byte(Canonical(t)))
	return hex.EncodeToString(sum[:])
}

// canon re-encodes raw JSON with sorted keys (encoding/json sorts map
// keys) and numbers kept as written; invalid JSON is kept as a string.
func canon(m json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(m)) == 0 || string(bytes.TrimSpace(m)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(m))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		b, _ := json.Marshal(string(m))
		return b
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(string(m))
	}
	return b
}

// ServerOf returns the server part of a tool's full name.
func ServerOf(tool string) string {
	s, _, _ := strings.Cut(tool, "/")
	return s
}

// Held is a tool a check held back or flagged.
type Held struct {
	Tool       string
	Mode       ext.PinMode
	Change     string // "new" or "changed"
	ByOperator bool
}

// Reason is the sentence a refused call or the status gives.
func (h Held) Reason() string {
	who := "you approve it on the settings page or the operator with agenthost pins approve " + ServerOf(h.Tool) + " --user USER"
	if h.ByOperator {
		who = "the operator approves it with agenthost pins approve " + ServerOf(h.Tool)
	}
	what := "its definition changed since it was approved"
	if h.Change == "new" {
		what = "it is new since the server's tools were pinned"
	}
	return fmt.Sprintf("tool %q is blocked by a pin: %s; %s", h.Tool, what, who)
}

// Manager checks published tools against the baselines and approves
// changes.
type Manager struct {
	st     Store
	logger *slog.Logger
	now    func() time.Time
	mu     sync.Mutex
	// blocked counts the tools held back (once per user, tool and
	// pending definition).
	blocked atomic.Int64
}

// NewManager returns a Manager over st; logger hears each change once.
func NewManager(st Store, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{st: st, logger: logger, now: time.Now}
}

// Store returns the manager's store.
func (m *Manager) Store() Store { return m.st }

// Blocked returns how many tools checks have held back since start (one
// per user, tool and pending definition).
func (m *Manager) Blocked() int64 { return m.blocked.Load() }

// Check compares the tools published for user against their baselines:
// it returns the tools to register (tools without those held back) and
// the held and flagged ones by name. A server seen for the first time
// (no row of user's for it) takes its tools as the baseline. Tools with
// an empty or off pin pass untouched.
func (m *Manager) Check(ctx context.Context, user string, tools []ext.Tool) (keep []ext.Tool, held map[string]Held, err error) {
	byServer := map[string][]int{}
	for i, t := range tools {
		if t.Pin == ext.PinWarn || t.Pin == ext.PinBlock {
			s := ServerOf(t.Name)
			byServer[s] = append(byServer[s], i)
		}
	}
	if len(byServer) == 0 {
		return tools, nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	drop := map[int]bool{}
	held = map[string]Held{}
	var put []Row
	now := m.now().UTC()
	servers := make([]string, 0, len(byServer))
	for s := range byServer {
		servers = append(servers, s)
	}
	sort.Strings(servers)
	for _, server := range servers {
		idx := byServer[server]
		rows, err := m.st.Rows(ctx, Filter{User: user, Server: server})
		if err != nil {
			return nil, nil, fmt.Errorf("reading the pins of server %q for user %q: %w", server, user, err)
		}
		if len(rows) == 0 {
			// The user's first sight of the server: the baseline, but
			// for an operator's server a tool other users already have
			// must match one of their baselines (only where the lists
			// differ does this user's sight alone decide).
			for _, i := range idx {
				t := tools[i]
				r := Row{User: user, Server: server, Tool: t.Name, ByOperator: t.PinByOperator, Mode: t.Pin,
					Hash: Hash(t), Def: Canonical(t), ApprovedAt: now, ApprovedBy: "first seen"}
				if t.PinByOperator {
					other, err := m.othersBaseline(ctx, user, t.Name, r.Hash)
					if err != nil {
						return nil, nil, err
					}
					if other != nil {
						r.Hash, r.Def, r.ApprovedAt, r.ApprovedBy = other.Hash, other.Def, other.ApprovedAt, other.ApprovedBy
						r.PendingHash, r.PendingDef, r.PendingSince = Hash(t), Canonical(t), now
						hl := Held{Tool: t.Name, Mode: t.Pin, Change: "changed", ByOperator: true}
						held[t.Name] = hl
						if t.Pin == ext.PinBlock {
							drop[i] = true
							m.blocked.Add(1)
						}
						m.logger.Warn("a pinned tool differs from what the other users of its server approved",
							"user", user, "tool", t.Name, "pin", string(t.Pin), "hash", r.PendingHash)
					}
				}
				put = append(put, r)
			}
			continue
		}
		byTool := make(map[string]Row, len(rows))
		for _, r := range rows {
			byTool[r.Tool] = r
		}
		listed := map[string]bool{}
		for _, i := range idx {
			t := tools[i]
			listed[t.Name] = true
			h := Hash(t)
			r, ok := byTool[t.Name]
			if !ok {
				r = Row{User: user, Server: server, Tool: t.Name}
			}
			changed := r.Mode != t.Pin || r.ByOperator != t.PinByOperator
			r.Mode, r.ByOperator = t.Pin, t.PinByOperator
			if r.Hash == h {
				if r.Pending() || changed {
					r.PendingHash, r.PendingDef, r.PendingSince = "", "", time.Time{}
					put = append(put, r)
				}
				continue
			}
			if t.PinByOperator {
				ok, err := m.st.ApprovedByOperator(ctx, t.Name, h)
				if err != nil {
					return nil, nil, fmt.Errorf("reading the operator's approvals of tool %q: %w", t.Name, err)
				}
				if ok { // the operator approved this change for another user
					r.Hash, r.Def, r.ApprovedAt, r.ApprovedBy = h, Canonical(t), now, "operator"
					r.PendingHash, r.PendingDef, r.PendingSince = "", "", time.Time{}
					put = append(put, r)
					continue
				}
			}
			hl := Held{Tool: t.Name, Mode: t.Pin, Change: r.Change(), ByOperator: t.PinByOperator}
			held[t.Name] = hl
			if t.Pin == ext.PinBlock {
				drop[i] = true
			}
			if r.PendingHash != h {
				r.PendingHash, r.PendingDef, r.PendingSince = h, Canonical(t), now
				if t.Pin == ext.PinBlock {
					m.blocked.Add(1)
				}
				m.logger.Warn("a pinned tool's definition changed: "+map[ext.PinMode]string{ext.PinBlock: "held back until approved", ext.PinWarn: "it works, flagged"}[t.Pin],
					"user", user, "tool", t.Name, "change", hl.Change, "pin", string(t.Pin), "hash", h)
				changed = true
			}
			if changed {
				put = append(put, r)
			}
		}
		for _, r := range rows {
			if r.Pending() && !listed[r.Tool] { // the change went away
				r.PendingHash, r.PendingDef, r.PendingSince = "", "", time.Time{}
				put = append(put, r)
			}
		}
	}
	if len(put) > 0 {
		if err := m.st.Put(ctx, put); err != nil {
			return nil, nil, fmt.Errorf("saving the pins of user %q: %w", user, err)
		}
	}
	if len(drop) == 0 {
		return tools, held, nil
	}
	keep = make([]ext.Tool, 0, len(tools)-len(drop))
	for i, t := range tools {
		if !drop[i] {
			keep = append(keep, t)
		}
	}
	return keep, held, nil
}

// othersBaseline returns, for a user's first sight of an operator's
// server's tool with definition hash, another user's baseline of the same
// tool when hash matches none of the others' (the change the user would
// otherwise take as their baseline unseen); nil when it matches one, or
// when no other user has the tool.
func (m *Manager) othersBaseline(ctx context.Context, user, tool, hash string) (*Row, error) {
	rows, err := m.st.Rows(ctx, Filter{Tool: tool})
	if err != nil {
		return nil, fmt.Errorf("reading the other users' pins of tool %q: %w", tool, err)
	}
	var newest *Row
	for i, r := range rows {
		if r.User == user || !r.ByOperator || r.Hash == "" {
			continue
		}
		if r.Hash == hash {
			return nil, nil
		}
		if newest == nil || r.ApprovedAt.After(newest.ApprovedAt) {
			newest = &rows[i]
		}
	}
	return newest, nil
}

// Approval asks to approve pending changes.
type Approval struct {
	// Server names the server whose changes are approved.
	Server string
	// Tool, when set, approves only that tool (full name, or the
	// server's own name of it).
	Tool string
	// User approves that user's changes only; "" approves every user's
	// changes of the operator's servers (the operator).
	User string
	// ByUser is set when the user approves (their own servers only);
	// otherwise the operator approves.
	ByUser bool
}

// Approve turns the pending definitions a selects into the baseline and
// returns the rows approved (their new baseline). It fails with
// [ErrNothingPending] when nothing selected waits.
func (m *Manager) Approve(ctx context.Context, a Approval) ([]Row, error) {
	if a.Server == "" {
		return nil, fmt.Errorf("an approval needs a server: %w", ext.ErrInvalidArgument)
	}
	tool := a.Tool
	if tool != "" && !strings.HasPrefix(tool, a.Server+"/") {
		tool = a.Server + "/" + tool
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rows, err := m.st.Rows(ctx, Filter{User: a.User, Server: a.Server, Tool: tool, PendingOnly: true})
	if err != nil {
		return nil, fmt.Errorf("reading the pins of server %q: %w", a.Server, err)
	}
	by := "operator"
	if a.ByUser {
		by = "user"
	}
	now := m.now().UTC()
	var out []Row
	for _, r := range rows {
		switch {
		case a.ByUser && r.ByOperator:
			continue // the operator's server: the operator approves
		case a.User == "" && !r.ByOperator:
			continue // a user's own server: named with --user
		}
		r.Hash, r.Def, r.ApprovedAt, r.ApprovedBy = r.PendingHash, r.PendingDef, now, by
		r.PendingHash, r.PendingDef, r.PendingSince = "", "", time.Time{}
		out = append(out, r)
	}
	if len(out) == 0 {
		what := fmt.Sprintf("server %q", a.Server)
		if tool != "" {
			what = fmt.Sprintf("tool %q", tool)
		}
		switch {
		case a.ByUser:
			what += " among your own servers"
		case a.User != "":
			what += fmt.Sprintf(" for user %q", a.User)
		default:
			what += " among the operator's servers (a user's own server needs --user)"
		}
		return nil, fmt.Errorf("no pending change of %s: %w", what, ErrNothingPending)
	}
	if err := m.st.Put(ctx, out); err != nil {
		return nil, fmt.Errorf("saving the approval of server %q: %w", a.Server, err)
	}
	return out, nil
}

// View is a row as the surfaces show it: the approved and pending
// definitions as indented JSON, and their unified diff.
type View struct {
	User         string      `json:"user"`
	Server       string      `json:"server"`
	Tool         string      `json:"tool"`
	ByOperator   bool        `json:"byOperator"`
	Mode         ext.PinMode `json:"mode"`
	Pending      bool        `json:"pending"`
	Change       string      `json:"change,omitempty"` // new, changed
	Hash         string      `json:"hash,omitempty"`
	PendingHash  string      `json:"pendingHash,omitempty"`
	ApprovedAt   time.Time   `json:"approvedAt,omitzero"`
	ApprovedBy   string      `json:"approvedBy,omitempty"`
	PendingSince time.Time   `json:"pendingSince,omitzero"`
	Old          string      `json:"old,omitempty"`
	New          string      `json:"new,omitempty"`
	Diff         string      `json:"diff,omitempty"`
}

// View returns the row's view; the definitions and the diff only when
// it is pending.
func (r Row) View() View {
	v := View{User: r.User, Server: r.Server, Tool: r.Tool, ByOperator: r.ByOperator, Mode: r.Mode, Pending: r.Pending(),
		Hash: r.Hash, PendingHash: r.PendingHash, ApprovedAt: r.ApprovedAt, ApprovedBy: r.ApprovedBy, PendingSince: r.PendingSince}
	if r.Pending() {
		v.Change, v.Old, v.New, v.Diff = r.Change(), pretty(r.Def), pretty(r.PendingDef), r.Diff()
	}
	return v
}
