package host

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// PolicyConfig is the operator's tool policy (README "Tool policy and
// approval"): which users may see and call which tools, and which calls
// wait for a person's approval.
//
// Precedence: the rules are read in order and the FIRST rule that matches
// both the user and the tool decides (allow, deny or approve); a tool no
// rule matches takes Default. So an exception goes before the rule it
// excepts: [allow bob everything/*, deny * everything/*]. A tool that is
// allowed and annotated destructiveHint: true needs approval as well when
// ApproveDestructive is set, whichever rule let it through.
type PolicyConfig struct {
	// Default is what a tool no rule matches gets: "allow" (the default)
	// or "deny".
	Default string `json:"default,omitempty"`
	// ApproveDestructive asks a person's approval for every call of a
	// tool whose annotations say destructiveHint: true (an explicit true:
	// the annotation is the server's hint, and a tool without it is only
	// covered by an "approve" rule).
	ApproveDestructive bool `json:"approveDestructive,omitempty"`
	// MaxApprovalMinutes caps the window a user may open for a tool on
	// the settings page ("approve for N minutes"; default 60, at most
	// 1440).
	MaxApprovalMinutes int `json:"maxApprovalMinutes,omitempty"`
	// Rules, first match wins.
	Rules []PolicyRule `json:"rules,omitempty"`
}

// PolicyRule is one rule of the tool policy.
type PolicyRule struct {
	// Name is how errors and `agenthost config check` name the rule
	// (default "rules[i]").
	Name string `json:"name,omitempty"`
	// Users the rule is for: user IDs, "group:NAME" (the user's groups,
	// see [ext.UserGroups]) or "*" for everyone; at least one.
	Users []string `json:"users"`
	// Tools are path.Match globs over "server/tool", as [ext.Scope]'s:
	// "*" stops at the "/", so "github/*" is every tool of github and
	// "*/*" every tool; at least one.
	Tools []string `json:"tools"`
	// Effect is "allow", "deny" (the tool is absent for the user: not
	// listed, and a call is an unknown tool) or "approve" (listed, and
	// each call waits for the user's approval).
	Effect string `json:"effect"`
}

// The effects of a policy rule.
const (
	PolicyAllow   = "allow"
	PolicyDeny    = "deny"
	PolicyApprove = "approve"
)

// Limits of approvals.
const (
	defaultApprovalMinutes = 60
	maxApprovalMinutes     = 1440
	// pendingTTL is how long a call waiting for approval is kept: the
	// client is expected to retry within it.
	pendingTTL = time.Hour
	// maxPendingPerUser bounds a user's waiting calls: the oldest go.
	maxPendingPerUser = 50
	// approvalArgsBytes caps the arguments shown in a request for
	// approval (elicitation, settings page, API).
	approvalArgsBytes = 1024
)

// validate checks the block; errors name the field and the rule.
func (p *PolicyConfig) validate() []error {
	if p == nil {
		return nil
	}
	var errs []error
	switch p.Default {
	case "", PolicyAllow, PolicyDeny:
	default:
		errs = append(errs, fmt.Errorf("policy.default: %q is not allow or deny", p.Default))
	}
	if p.MaxApprovalMinutes < 0 || p.MaxApprovalMinutes > maxApprovalMinutes {
		errs = append(errs, fmt.Errorf("policy.maxApprovalMinutes: %d is not between 1 and %d", p.MaxApprovalMinutes, maxApprovalMinutes))
	}
	names := map[string]int{}
	for i, r := range p.Rules {
		name := r.label(i)
		if prev, ok := names[name]; ok && r.Name != "" {
			errs = append(errs, fmt.Errorf("policy.rules[%d] %q: the name is taken by rules[%d]", i, name, prev))
		}
		names[name] = i
		switch r.Effect {
		case PolicyAllow, PolicyDeny, PolicyApprove:
		default:
			errs = append(errs, fmt.Errorf("policy.rules[%d] %q: effect %q is not allow, deny or approve", i, name, r.Effect))
		}
		if len(r.Users) == 0 {
			errs = append(errs, fmt.Errorf("policy.rules[%d] %q: users: name at least one user, group:NAME or *", i, name))
		}
		for _, u := range r.Users {
			switch g, isGroup := strings.CutPrefix(u, "group:"); {
			case u == "*":
			case isGroup && g != "" && !strings.ContainsAny(g, "\x00 "):
			case isGroup:
				errs = append(errs, fmt.Errorf("policy.rules[%d] %q: users: %q names no group", i, name, u))
			default:
				if err := checkUser(u); err != nil {
					errs = append(errs, fmt.Errorf("policy.rules[%d] %q: users: %w", i, name, err))
				}
			}
		}
		if len(r.Tools) == 0 {
			errs = append(errs, fmt.Errorf("policy.rules[%d] %q: tools: name at least one glob over server/tool", i, name))
		}
		for _, g := range r.Tools {
			if _, err := path.Match(g, ""); err != nil || g == "" || strings.ContainsRune(g, 0) {
				errs = append(errs, fmt.Errorf("policy.rules[%d] %q: tools: %q is not a path.Match glob over server/tool", i, name, g))
			}
		}
	}
	return errs
}

func (r PolicyRule) label(i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rules[%d]", i)
}

// matchesUser reports whether the rule is for user, a member of groups.
func (r PolicyRule) matchesUser(user string, groups []string) bool {
	for _, u := range r.Users {
		if u == "*" || u == user {
			return true
		}
		if g, ok := strings.CutPrefix(u, "group:"); ok && slices.Contains(groups, g) {
			return true
		}
	}
	return false
}

// matchesTool reports whether one of the rule's globs matches name.
func (r PolicyRule) matchesTool(name string) bool {
	for _, g := range r.Tools {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// PolicyDecision is what the policy says of one tool for one user.
type PolicyDecision struct {
	// Effect is allow, deny or approve.
	Effect string
	// Rule names the rule that decided ("default" when none matched,
	// "approveDestructive" when that turned an allow into approve).
	Rule string
}

// Decide applies the policy to tool for user, a member of groups. A nil
// policy allows everything.
func (p *PolicyConfig) Decide(user string, groups []string, tool ext.Tool) PolicyDecision {
	if p == nil {
		return PolicyDecision{Effect: PolicyAllow, Rule: "default"}
	}
	d := PolicyDecision{Effect: PolicyAllow, Rule: "default"}
	if p.Default == PolicyDeny {
		d.Effect = PolicyDeny
	}
	for i, r := range p.Rules {
		if r.matchesUser(user, groups) && r.matchesTool(tool.Name) {
			d = PolicyDecision{Effect: r.Effect, Rule: r.label(i)}
			break
		}
	}
	if d.Effect == PolicyAllow && p.ApproveDestructive && destructive(tool.Annotations) {
		d = PolicyDecision{Effect: PolicyApprove, Rule: "approveDestructive"}
	}
	return d
}

// Describe is the policy in lines for `agenthost config check`: the
// precedence, the default and each rule by name.
func (p *PolicyConfig) Describe() []string {
	if p == nil {
		return []string{"policy: none (every user sees and calls all their tools)"}
	}
	def := cmp.Or(p.Default, PolicyAllow)
	out := []string{fmt.Sprintf("policy: first matching rule wins; default %s; approveDestructive %v; approval windows up to %d min",
		def, p.ApproveDestructive, p.maxWindow())}
	for i, r := range p.Rules {
		out = append(out, fmt.Sprintf("  %d. %s: %s tools %s for %s", i+1, r.label(i), r.Effect,
			strings.Join(r.Tools, ","), strings.Join(r.Users, ",")))
	}
	return out
}

func (p *PolicyConfig) maxWindow() int {
	if p == nil || p.MaxApprovalMinutes == 0 {
		return defaultApprovalMinutes
	}
	return p.MaxApprovalMinutes
}

// destructive reports whether raw MCP tool annotations say
// destructiveHint: true.
func destructive(annotations json.RawMessage) bool {
	if !bytes.Contains(annotations, []byte(`"destructiveHint"`)) {
		return false // no decoding for the tools that say nothing of it
	}
	var a struct {
		DestructiveHint *bool `json:"destructiveHint"`
	}
	return json.Unmarshal(annotations, &a) == nil && a.DestructiveHint != nil && *a.DestructiveHint
}

// policy is the tool policy in force (nil: none): the operator's file's,
// or a reload's (reload.go), read without a lock.
func (h *Host) policy() *PolicyConfig { return h.pol.Load() }

// decide is the policy's word on tool for user, with the user's groups.
func (h *Host) decide(user string, tool ext.Tool) PolicyDecision {
	p := h.policy()
	if p == nil {
		return PolicyDecision{Effect: PolicyAllow, Rule: "default"}
	}
	return p.Decide(user, h.UserGroups(user), tool)
}

// visible drops the tools the policy denies user.
func (h *Host) visible(user string, tools []Tool) []Tool {
	p := h.policy()
	if p == nil {
		return tools
	}
	groups := h.UserGroups(user)
	return slices.DeleteFunc(tools, func(t Tool) bool {
		return p.Decide(user, groups, t.Tool).Effect == PolicyDeny
	})
}

// Approval is a call waiting for its user's approval, as the settings
// page and /api/v1/approvals show it.
type Approval = api.Approval

// ApprovalRequired is the error of a call refused for want of approval.
type ApprovalRequired = api.ApprovalRequired

// approvals holds the calls waiting for approval and the windows users
// opened, in memory: a waiting call lives an hour at most (its client
// retries within minutes) and a window a day at most, so a restart loses
// only what its user approves again. Safe for concurrent use.
type approvals struct {
	mu      sync.Mutex
	pending map[string]*pendingCall         // id → call
	windows map[string]map[string]time.Time // user → tool → until
	link    func() string                   // the settings page's URL; nil: none
}

type pendingCall struct {
	Approval
	user  string
	key   string // hash of user, tool and arguments: the retry's
	state string // "waiting", "approved" (the retry runs once), "denied"
}

func newApprovals() *approvals {
	return &approvals{pending: map[string]*pendingCall{}, windows: map[string]map[string]time.Time{}}
}

// callKey identifies a call for its retry: the user, the tool and the
// arguments (compacted, so whitespace does not matter).
func callKey(user, tool string, args json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		b.Reset()
		b.Write(args)
	}
	sum := sha256.Sum256([]byte(user + "\x00" + tool + "\x00" + b.String()))
	return hex.EncodeToString(sum[:])
}

// sweepLocked drops the expired waiting calls and windows.
func (a *approvals) sweepLocked(now time.Time) {
	for id, p := range a.pending {
		if now.Sub(p.Created) > pendingTTL {
			delete(a.pending, id)
		}
	}
	for u, m := range a.windows {
		for t, until := range m {
			if !now.Before(until) {
				delete(m, t)
			}
		}
		if len(m) == 0 {
			delete(a.windows, u)
		}
	}
}

// SetApprovalLink gives the host the URL of the settings page, where a
// user approves a waiting call (agenthost serve sets it): a refusal for
// want of approval carries it.
func (h *Host) SetApprovalLink(link func() string) {
	h.approvals.mu.Lock()
	h.approvals.link = link
	h.approvals.mu.Unlock()
}

// SetPolicyCounter gives the host the counter of its policy's decisions
// (agenthost serve hands it its telemetry's): denied, approved,
// declined, pending, window, once.
func (h *Host) SetPolicyCounter(count func(decision string)) {
	h.approvals.mu.Lock()
	h.policyCount = count
	h.approvals.mu.Unlock()
}

func (h *Host) countPolicy(decision string) {
	h.approvals.mu.Lock()
	c := h.policyCount
	h.approvals.mu.Unlock()
	if c != nil {
		c(decision)
	}
}

// auditApproval records an approval asked, given or refused.
func (h *Host) auditApproval(user, tool, cred, sess, outcome, reason string) {
	if h.audit == nil {
		return
	}
	if cred == "" {
		cred = "api"
	}
	server, _, _ := strings.Cut(tool, "/")
	h.audit.Add(audit.Record{Time: time.Now(), Kind: audit.KindApproval, User: user, Credential: cred, Session: sess,
		Server: server, Tool: tool, Outcome: outcome, Reason: reason})
}

// approve lets a call that needs approval run, or refuses it: an open
// window of the user for the tool, or the user's approval of this very
// call on the settings page, lets it run; else the calling client is
// asked through elicitation when it declared it; else the call waits as
// a pending approval and the error carries the settings page's link.
func (h *Host) approve(ctx context.Context, req *CallRequest, rule string) error {
	a := h.approvals
	now := time.Now()
	key := callKey(req.User, req.Name, req.Arguments)
	a.mu.Lock()
	a.sweepLocked(now)
	if until, ok := a.windows[req.User][req.Name]; ok && now.Before(until) {
		a.mu.Unlock()
		h.countPolicy("window")
		return nil
	}
	var waiting *pendingCall
	for id, p := range a.pending {
		if p.key != key {
			continue
		}
		switch p.state {
		case "approved":
			delete(a.pending, id)
			a.mu.Unlock()
			h.countPolicy("once")
			return nil
		case "denied":
			delete(a.pending, id)
			a.mu.Unlock()
			h.countPolicy("declined")
			h.auditApproval(req.User, req.Name, req.Credential, req.SessionID, audit.OutcomeRefused, "denied on the settings page")
			return &ApprovalRequired{Tool: req.Name, Denied: true}
		default:
			waiting = p
		}
	}
	a.mu.Unlock()

	if req.Session != nil && ext.HasCapability(req.Session.Capabilities(), "elicitation") {
		ok, err := h.elicitApproval(ctx, req)
		switch {
		case err == nil && ok:
			h.countPolicy("approved")
			h.auditApproval(req.User, req.Name, req.Credential, req.SessionID, audit.OutcomeOK, "approved through the client (elicitation)")
			return nil
		case err == nil:
			h.countPolicy("declined")
			h.auditApproval(req.User, req.Name, req.Credential, req.SessionID, audit.OutcomeRefused, "declined through the client (elicitation)")
			return &ApprovalRequired{Tool: req.Name, Denied: true}
		case ctx.Err() != nil:
			return fmt.Errorf("asking approval of tool %q: %w", req.Name, ctx.Err())
		}
		// A client that cannot be asked after all (the stateless
		// revision 2026-07-28 has no requests to the client) is no
		// trouble; another failure is worth a look.
		level := slog.LevelWarn
		if errors.Is(err, ext.ErrUnimplemented) {
			level = slog.LevelInfo
		}
		h.logger.Log(ctx, level, "asking a client's approval failed: the call waits on the settings page", "user", req.User, "tool", req.Name, "error", err)
	}

	a.mu.Lock()
	if waiting == nil {
		// The same call may have started waiting meanwhile (a client
		// that sent it twice at once): one waiting call for both.
		for _, p := range a.pending {
			if p.key == key && p.state == "waiting" {
				waiting = p
				break
			}
		}
	}
	if waiting == nil {
		waiting = &pendingCall{key: key, state: "waiting", Approval: Approval{
			ID: newApprovalID(), Tool: req.Name, Arguments: capArgs(req.Arguments), Created: now, Rule: rule,
		}}
		a.evictLocked(req.User)
		waiting.user = req.User
		a.pending[waiting.ID] = waiting
	}
	id := waiting.ID
	var link string
	if a.link != nil {
		link = a.link() + "#approval-" + id
	}
	a.mu.Unlock()
	h.countPolicy("pending")
	h.auditApproval(req.User, req.Name, req.Credential, req.SessionID, audit.OutcomeRefused, "waiting for approval "+id+" (rule "+rule+")")
	return &ApprovalRequired{Tool: req.Name, ID: id, URL: link}
}

// evictLocked drops user's oldest waiting calls beyond the bound.
func (a *approvals) evictLocked(user string) {
	var mine []*pendingCall
	for _, p := range a.pending {
		if p.user == user {
			mine = append(mine, p)
		}
	}
	if len(mine) < maxPendingPerUser {
		return
	}
	slices.SortFunc(mine, func(x, y *pendingCall) int { return x.Created.Compare(y.Created) })
	for _, p := range mine[:len(mine)-maxPendingPerUser+1] {
		delete(a.pending, p.ID)
	}
}

func newApprovalID() string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return "ap_" + hex.EncodeToString(b)
}

// capArgs is the arguments as shown for approval, cut to
// approvalArgsBytes.
func capArgs(args json.RawMessage) string {
	var b bytes.Buffer
	if len(args) == 0 || json.Compact(&b, args) != nil {
		b.Reset()
		b.WriteString(cmp.Or(string(args), "{}"))
	}
	return audit.Cap(b.String(), approvalArgsBytes)
}

// elicitApproval asks the calling client's user: approve once or deny.
func (h *Host) elicitApproval(ctx context.Context, req *CallRequest) (bool, error) {
	params, err := json.Marshal(map[string]any{
		"mode": "form",
		"message": fmt.Sprintf("agenthost: the operator asks your approval for each call of tool %q. Arguments: %s",
			req.Name, capArgs(req.Arguments)),
		"requestedSchema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{
					"type": "string", "title": "Allow this call?",
					"enum": []string{"approve", "deny"}, "enumNames": []string{"Approve once", "Deny"},
				},
			},
			"required": []string{"decision"},
		},
	})
	if err != nil {
		return false, fmt.Errorf("encoding the approval request: %w", err)
	}
	out, err := req.Session.Request(ctx, ext.MethodElicit, params)
	if err != nil {
		return false, err
	}
	var res struct {
		Action  string `json:"action"`
		Content struct {
			Decision string `json:"decision"`
		} `json:"content"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return false, fmt.Errorf("the client's answer to the approval request: %w", err)
	}
	return res.Action == "accept" && res.Content.Decision == "approve", nil
}

// Approvals returns user's calls waiting for approval, oldest first.
func (h *Host) Approvals(_ context.Context, user string) ([]Approval, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	a := h.approvals
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(time.Now())
	out := []Approval{}
	for _, p := range a.pending {
		if p.user == user && p.state == "waiting" {
			out = append(out, p.Approval)
		}
	}
	slices.SortFunc(out, func(x, y Approval) int { return x.Created.Compare(y.Created) })
	return out, nil
}

// DecideApproval answers user's waiting call id: approve (minutes 0: this
// call once, when its client retries it; minutes > 0: every call of that
// tool by user for that long, within the policy's maxApprovalMinutes) or
// deny. A call that is not user's, or gone, is [ext.ErrNotFound].
func (h *Host) DecideApproval(_ context.Context, user, id string, approve bool, minutes int) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if maxWindow := h.policy().maxWindow(); approve && (minutes < 0 || minutes > maxWindow) {
		return fmt.Errorf("approval window of %d minutes: want 0 (once) to %d: %w", minutes, maxWindow, ext.ErrInvalidArgument)
	}
	a := h.approvals
	a.mu.Lock()
	a.sweepLocked(time.Now())
	p := a.pending[id]
	if p == nil || p.user != user || p.state != "waiting" {
		a.mu.Unlock()
		return fmt.Errorf("approval %q of user %q: %w", id, user, ext.ErrNotFound)
	}
	tool := p.Tool
	var reason string
	switch {
	case !approve:
		p.state, reason = "denied", "denied on the settings page"
	case minutes == 0:
		p.state, reason = "approved", "approved once on the settings page"
	default:
		if a.windows[user] == nil {
			a.windows[user] = map[string]time.Time{}
		}
		a.windows[user][tool] = time.Now().Add(time.Duration(minutes) * time.Minute)
		delete(a.pending, id)
		reason = fmt.Sprintf("approved for %d minutes on the settings page", minutes)
	}
	a.mu.Unlock()
	outcome := audit.OutcomeOK
	if !approve {
		outcome = audit.OutcomeRefused
	}
	h.auditApproval(user, tool, "settings", "", outcome, reason+" ("+id+")")
	h.logger.Info("approval decided", "user", user, "tool", tool, "approval", id, "approve", approve, "minutes", minutes)
	return nil
}

// errPolicyDenied words the not-found of a denied tool as a missing one's.
func errPolicyDenied(user, name string) error {
	return fmt.Errorf("tool %q for user %q: %w", name, user, ext.ErrNotFound)
}
