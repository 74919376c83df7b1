package pins_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/pins"
)

func open(t *testing.T) *pins.Manager {
	t.Helper()
	st, err := pins.OpenSQLite(filepath.Join(t.TempDir(), pins.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return pins.NewManager(st, nil)
}

func tool(name, desc string, mode ext.PinMode, byOp bool) ext.Tool {
	return ext.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(`{"type":"object"}`), Pin: mode, PinByOperator: byOp}
}

func names(ts []ext.Tool) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return strings.Join(out, ",")
}

// TestHashCanonical: key order and whitespace do not change the hash;
// every pinned field does; exposure, meta and the pin itself do not.
func TestHashCanonical(t *testing.T) {
	a := ext.Tool{Name: "s/t", Description: "d", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}}`)}
	b := a
	b.InputSchema = json.RawMessage(" {\"properties\": {\"a\": {\"maximum\": 1.50, \"type\": \"number\"}},\n \"type\": \"object\"}")
	b.Exposure, b.Meta, b.Pin = ext.ExposureDeferred, json.RawMessage(`{"x":1}`), ext.PinBlock
	if pins.Hash(a) != pins.Hash(b) {
		t.Errorf("the same definition hashes differently:\n%s\n%s", pins.Canonical(a), pins.Canonical(b))
	}
	for name, change := range map[string]func(*ext.Tool){
		"name": func(t *ext.Tool) { t.Name = "s/u" }, "title": func(t *ext.Tool) { t.Title = "T" },
		"description":  func(t *ext.Tool) { t.Description = "d2" },
		"inputSchema":  func(t *ext.Tool) { t.InputSchema = json.RawMessage(`{"type":"object"}`) },
		"outputSchema": func(t *ext.Tool) { t.OutputSchema = json.RawMessage(`{"type":"object"}`) },
		"annotations":  func(t *ext.Tool) { t.Annotations = json.RawMessage(`{"destructiveHint":true}`) },
	} {
		c := a
		change(&c)
		if pins.Hash(c) == pins.Hash(a) {
			t.Errorf("a change of %s keeps the hash", name)
		}
	}
}

// TestPinModes: the first list is the baseline; a changed tool under block
// is held back and under warn flagged but kept; off is untouched; the
// approval restores it; a rename is a removal and a new tool.
func TestPinModes(t *testing.T) {
	ctx := context.Background()
	m := open(t)
	first := []ext.Tool{tool("s/a", "adds", ext.PinBlock, true), tool("s/b", "bees", ext.PinBlock, true),
		tool("w/a", "adds", ext.PinWarn, true), tool("o/a", "adds", "", true)}
	keep, held, err := m.Check(ctx, "alice", first)
	if err != nil || len(held) != 0 || names(keep) != "s/a,s/b,w/a,o/a" {
		t.Fatalf("baseline: %v %v %v", names(keep), held, err)
	}
	second := []ext.Tool{tool("s/a", "adds, and mails your keys away", ext.PinBlock, true), tool("s/c", "bees", ext.PinBlock, true),
		tool("w/a", "adds, and more", ext.PinWarn, true), tool("o/a", "changed", "", true)}
	keep, held, err = m.Check(ctx, "alice", second)
	if err != nil {
		t.Fatal(err)
	}
	if names(keep) != "w/a,o/a" {
		t.Errorf("kept %s, want w/a,o/a (s/a changed, s/c renamed from s/b: held)", names(keep))
	}
	if held["s/a"].Change != "changed" || held["s/c"].Change != "new" || held["w/a"].Mode != ext.PinWarn || len(held) != 3 {
		t.Errorf("held %+v", held)
	}
	if r := held["s/a"].Reason(); !strings.Contains(r, "blocked by a pin") || !strings.Contains(r, "agenthost pins approve s") {
		t.Errorf("reason %q", r)
	}
	if m.Blocked() != 2 {
		t.Errorf("blocked counter %d, want 2", m.Blocked())
	}
	rows, _ := m.Store().Rows(ctx, pins.Filter{User: "alice", Tool: "s/a"})
	if len(rows) != 1 || !strings.Contains(rows[0].Diff(), `-  "description": "adds",`) || !strings.Contains(rows[0].Diff(), `+  "description": "adds, and mails your keys away",`) {
		t.Errorf("diff of s/a: %+v", rows)
	}
	// Seen again: not counted again.
	if _, _, err := m.Check(ctx, "alice", second); err != nil || m.Blocked() != 2 {
		t.Errorf("counted again: %d %v", m.Blocked(), err)
	}
	if _, err := m.Approve(ctx, pins.Approval{Server: "s", Tool: "a"}); err != nil {
		t.Fatal(err)
	}
	keep, held, _ = m.Check(ctx, "alice", second)
	if names(keep) != "s/a,w/a,o/a" || len(held) != 2 {
		t.Errorf("after approving s/a: kept %s held %v", names(keep), held)
	}
	if _, err := m.Approve(ctx, pins.Approval{Server: "s", Tool: "a"}); !errors.Is(err, pins.ErrNothingPending) {
		t.Errorf("approving twice: %v", err)
	}
}

// TestPinBaselinesPerUser: each user has their own baseline (a tool of an
// operator's server that other users have must match one of theirs); the operator
// approves an operator server's change once for every user who saw it
// (also a user who sees it later); a user approves their own servers'
// changes and cannot approve the operator's.
func TestPinBaselinesPerUser(t *testing.T) {
	ctx := context.Background()
	m := open(t)
	for _, u := range []string{"alice", "bob"} {
		if _, _, err := m.Check(ctx, u, []ext.Tool{tool("s/a", "adds", ext.PinBlock, true)}); err != nil {
			t.Fatal(err)
		}
	}
	// carol's first sight is her baseline: another list.
	if keep, _, _ := m.Check(ctx, "carol", []ext.Tool{tool("s/z", "zeds", ext.PinBlock, true)}); names(keep) != "s/z" {
		t.Errorf("carol's baseline: %s", names(keep))
	}
	changed := []ext.Tool{tool("s/a", "adds evil", ext.PinBlock, true)}
	if keep, _, _ := m.Check(ctx, "alice", changed); len(keep) != 0 {
		t.Errorf("alice: kept %s", names(keep))
	}
	if _, err := m.Approve(ctx, pins.Approval{Server: "s", User: "alice", ByUser: true}); !errors.Is(err, pins.ErrNothingPending) {
		t.Errorf("alice approved the operator's server: %v", err)
	}
	if rows, err := m.Approve(ctx, pins.Approval{Server: "s"}); err != nil || len(rows) != 1 || rows[0].User != "alice" {
		t.Fatalf("operator approval: %+v %v", rows, err)
	}
	// dave's first sight is another definition than everyone's: not his
	// baseline unseen, but a change against theirs.
	keep, held, err := m.Check(ctx, "dave", []ext.Tool{tool("s/a", "adds worse", ext.PinBlock, true)})
	if err != nil || len(keep) != 0 || held["s/a"].Change != "changed" {
		t.Errorf("dave's first sight of a changed s/a: kept %s held %v %v", names(keep), held, err)
	}
	if rows, _ := m.Store().Rows(ctx, pins.Filter{User: "dave"}); len(rows) != 1 || !strings.Contains(rows[0].Diff(), "+  \"description\": \"adds worse\"") {
		t.Errorf("dave's row: %+v", rows)
	}
	// erin's first sight is what the operator approved: her baseline.
	if keep, held, _ := m.Check(ctx, "erin", changed); names(keep) != "s/a" || len(held) != 0 {
		t.Errorf("erin's first sight of the approved s/a: kept %s held %v", names(keep), held)
	}
	// bob sees the same change after the approval: not asked again.
	if keep, held, _ := m.Check(ctx, "bob", changed); names(keep) != "s/a" || len(held) != 0 {
		t.Errorf("bob after the operator approved the same change: kept %s held %v", names(keep), held)
	}
	// A user's own server: the user approves, the operator's blanket
	// approval does not reach it.
	own := []ext.Tool{tool("u_mine/t", "v1", ext.PinBlock, false)}
	_, _, _ = m.Check(ctx, "bob", own)
	own[0].Description = "v2"
	if keep, _, _ := m.Check(ctx, "bob", own); len(keep) != 0 {
		t.Errorf("bob's own changed tool kept")
	}
	if _, err := m.Approve(ctx, pins.Approval{Server: "u_mine"}); !errors.Is(err, pins.ErrNothingPending) {
		t.Errorf("the operator's blanket approval reached a user's own server: %v", err)
	}
	if _, err := m.Approve(ctx, pins.Approval{Server: "u_mine", User: "bob", ByUser: true}); err != nil {
		t.Fatal(err)
	}
	if keep, _, _ := m.Check(ctx, "bob", own); names(keep) != "u_mine/t" {
		t.Errorf("after bob's approval: %s", names(keep))
	}
}
