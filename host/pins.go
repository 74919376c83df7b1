package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/audit"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// PinView is one tool's pin as the surfaces show it (README "Tool
// pinning"): its baseline, and the pending definition with the diff.
type PinView = pins.View

// PinApproval asks to approve pending tool changes of one server.
type PinApproval = pins.Approval

// AuditKindPin is the audit records' kind of a pin approval.
const AuditKindPin = "pin"

// pinTimeout bounds a check of the pins of one publication.
const pinTimeout = 10 * time.Second

// openPins opens pins.db and hooks the registry's check to it: every list
// of a user's tools an extension publishes passes the pins (registry.pins).
func openPins(dataDir string, h *Host) error {
	st, err := pins.OpenSQLite(filepath.Join(dataDir, pins.FileName))
	if err != nil {
		return err
	}
	h.pins = pins.NewManager(st, h.logger)
	h.reg.pins = func(user string, tools []ext.Tool) ([]ext.Tool, map[string]pins.Held) {
		ctx, cancel := context.WithTimeout(h.life, pinTimeout)
		defer cancel()
		keep, held, err := h.pins.Check(ctx, user, tools)
		if err != nil {
			// Fail closed: the tools under block are held back until
			// their pins can be read.
			h.logger.Error("checking tool pins failed: tools under pin block are held back", "user", user, "error", err)
			keep, held = nil, map[string]pins.Held{}
			for _, t := range tools {
				if t.Pin == ext.PinBlock {
					held[t.Name] = pins.Held{Tool: t.Name, Mode: t.Pin, Change: "unchecked", ByOperator: t.PinByOperator}
					continue
				}
				keep = append(keep, t)
			}
		}
		return keep, held
	}
	return nil
}

func (h *Host) closePins() error {
	if h.pins == nil {
		return nil
	}
	if err := h.pins.Store().Close(); err != nil {
		return fmt.Errorf("closing the pins database: %w", err)
	}
	return nil
}

// Pins returns the pins of user ("": every user's) on server ("": every
// server), only those waiting for an approval unless all is set.
func (h *Host) Pins(ctx context.Context, user, server string, all bool) ([]PinView, error) {
	if user != "" {
		if err := checkUser(user); err != nil {
			return nil, err
		}
	}
	rows, err := h.pins.Store().Rows(ctx, pins.Filter{User: user, Server: server, PendingOnly: !all})
	if err != nil {
		return nil, fmt.Errorf("reading the tool pins: %w", err)
	}
	out := make([]PinView, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.View())
	}
	return out, nil
}

// OwnPins is Pins of user as user may see them: the tools the policy
// denies them are absent for them, here too.
func (h *Host) OwnPins(ctx context.Context, user string, all bool) ([]PinView, error) {
	vs, err := h.Pins(ctx, user, "", all)
	if err != nil {
		return nil, err
	}
	out := vs[:0]
	for _, v := range vs {
		if v.User == user && !h.deniedName(user, v.Tool) {
			out = append(out, v)
		}
	}
	return out, nil
}

// ApprovePins approves the pending changes a selects: they become the
// baseline, and the tools held back are registered again (their users'
// sessions hear list_changed). Each approval is audited with cred as the
// credential. Nothing pending is [ext.ErrNotFound].
func (h *Host) ApprovePins(ctx context.Context, a PinApproval, cred string) (_ []PinView, err error) {
	if a.User != "" {
		if err := checkUser(a.User); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	rows, err := h.pins.Approve(ctx, a)
	if errors.Is(err, pins.ErrNothingPending) {
		err = ext.Mark(err, ext.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	users := map[string]bool{}
	out := make([]PinView, 0, len(rows))
	for _, r := range rows {
		users[r.User] = true
		out = append(out, r.View())
		h.AuditEvent(audit.Record{Time: start, Kind: AuditKindPin, User: r.User, Credential: cred, Server: r.Server, Tool: r.Tool,
			ToolHash: r.Hash, Outcome: audit.OutcomeOK, Reason: "approved by the " + r.ApprovedBy, Duration: time.Since(start)})
	}
	for u := range users {
		h.reg.recheck(u)
	}
	h.logger.Info("tool pins approved", "server", a.Server, "tool", a.Tool, "user", a.User, "by", map[bool]string{true: "user", false: "operator"}[a.ByUser], "tools", len(rows))
	return out, nil
}

// PinsBlocked counts the tools pins held back since the host started (one
// per user, tool and pending definition).
func (h *Host) PinsBlocked() int64 {
	if h.pins == nil {
		return 0
	}
	return h.pins.Blocked()
}

// pinStatus adds what the pins hold back or flag to the status entries of
// the servers: "blocked by a pin: N tools changed".
func (h *Host) pinStatus(entries []StatusEntry) {
	type key struct{ user, server string }
	var blocked, flagged map[key]int
	cache := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		if !cache[e.User] {
			cache[e.User] = true
			for _, hl := range h.heldTools(e.User) {
				k := key{e.User, pins.ServerOf(hl.Tool)}
				if hl.Mode == ext.PinBlock {
					if blocked == nil {
						blocked = map[key]int{}
					}
					blocked[k]++
				} else {
					if flagged == nil {
						flagged = map[key]int{}
					}
					flagged[k]++
				}
			}
		}
		k := key{e.User, e.Name}
		var add string
		if n := blocked[k]; n > 0 {
			add = fmt.Sprintf("blocked by a pin: %d %s changed (agenthost pins diff %s)", n, plural(n, "tool", "tools"), e.Name)
			if e.State == "connected" {
				e.State = "pin_blocked"
			}
		}
		if n := flagged[k]; n > 0 {
			add = joinReason(add, fmt.Sprintf("flagged by a pin: %d %s changed (agenthost pins diff %s)", n, plural(n, "tool", "tools"), e.Name))
		}
		if add != "" {
			e.Reason = joinReason(e.Reason, add)
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// HeldTools returns user's tools a pin holds back, by name, with the
// sentence that says why (the MCP endpoint's answer to a call of one).
func (h *Host) HeldTools(user string) map[string]string {
	var out map[string]string
	for _, hl := range h.heldTools(user) {
		if hl.Mode != ext.PinBlock {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[hl.Tool] = hl.Reason()
	}
	return out
}

// heldTools is the registry's held and flagged tools of user less those
// the tool policy denies them: a denied tool is absent, so no surface
// may name it, not even as held back by a pin.
func (h *Host) heldTools(user string) []pins.Held {
	all := h.reg.heldTools(user)
	out := all[:0:0]
	for _, hl := range all {
		if !h.deniedName(user, hl.Tool) {
			out = append(out, hl)
		}
	}
	return out
}

// heldTool is the registry's heldTool, unless the policy denies user
// the tool (then it is absent: not found, like any denied tool).
func (h *Host) heldTool(user, name string) (pins.Held, bool) {
	hl, ok := h.reg.heldTool(user, name)
	if !ok || h.deniedName(user, name) {
		return pins.Held{}, false
	}
	return hl, true
}

// deniedName says whether the policy denies user the tool name by its
// rules over names (a held tool's definition is not registered, so
// annotations cannot count here; only deny matters).
func (h *Host) deniedName(user, name string) bool {
	return h.decide(user, ext.Tool{Name: name}).Effect == PolicyDeny
}
