package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// TestPolicyDecide: the first rule that matches user and tool decides;
// none: the default; groups match through group:NAME, "*" everyone; an
// allowed tool annotated destructiveHint: true needs approval under
// approveDestructive (an explicit true only).
func TestPolicyDecide(t *testing.T) {
	p := &host.PolicyConfig{
		ApproveDestructive: true,
		Rules: []host.PolicyRule{
			{Name: "bob-everything", Users: []string{"bob"}, Tools: []string{"everything/*"}, Effect: "allow"},
			{Name: "no-everything", Users: []string{"*"}, Tools: []string{"everything/*"}, Effect: "deny"},
			{Name: "ops-delete", Users: []string{"group:ops"}, Tools: []string{"files/delete_*"}, Effect: "approve"},
			{Name: "no-delete", Users: []string{"alice", "group:interns"}, Tools: []string{"files/delete_*"}, Effect: "deny"},
		},
	}
	destr := json.RawMessage(`{"destructiveHint":true}`)
	for _, c := range []struct {
		user   string
		groups []string
		tool   ext.Tool
		effect string
		rule   string
	}{
		{"bob", nil, ext.Tool{Name: "everything/echo"}, "allow", "bob-everything"},
		{"alice", nil, ext.Tool{Name: "everything/echo"}, "deny", "no-everything"},
		{"carol", []string{"ops"}, ext.Tool{Name: "everything/echo"}, "deny", "no-everything"},
		{"carol", []string{"ops"}, ext.Tool{Name: "files/delete_all"}, "approve", "ops-delete"},
		{"alice", []string{"ops"}, ext.Tool{Name: "files/delete_all"}, "approve", "ops-delete"}, // first match
		{"alice", nil, ext.Tool{Name: "files/delete_all"}, "deny", "no-delete"},
		{"dave", []string{"interns"}, ext.Tool{Name: "files/delete_one"}, "deny", "no-delete"},
		{"dave", nil, ext.Tool{Name: "files/delete_one"}, "allow", "default"},
		{"dave", nil, ext.Tool{Name: "files/read", Annotations: destr}, "approve", "approveDestructive"},
		{"dave", nil, ext.Tool{Name: "files/read", Annotations: json.RawMessage(`{"destructiveHint":false}`)}, "allow", "default"},
		{"dave", nil, ext.Tool{Name: "files/read", Annotations: json.RawMessage(`{"readOnlyHint":false}`)}, "allow", "default"},
		{"bob", nil, ext.Tool{Name: "everything/rm", Annotations: destr}, "approve", "approveDestructive"},
		{"alice", nil, ext.Tool{Name: "everything/rm", Annotations: destr}, "deny", "no-everything"},
		{"bob", nil, ext.Tool{Name: "everythingelse/x"}, "allow", "default"}, // * stops at the /
	} {
		d := p.Decide(c.user, c.groups, c.tool)
		if d.Effect != c.effect || d.Rule != c.rule {
			t.Errorf("Decide(%s %v, %s) = %+v, want %s by %s", c.user, c.groups, c.tool.Name, d, c.effect, c.rule)
		}
	}
	deny := &host.PolicyConfig{Default: "deny", Rules: []host.PolicyRule{{Users: []string{"*"}, Tools: []string{"notes/*"}, Effect: "allow"}}}
	if d := deny.Decide("x", nil, ext.Tool{Name: "web/fetch"}); d.Effect != "deny" || d.Rule != "default" {
		t.Errorf("default deny: %+v", d)
	}
	if d := deny.Decide("x", nil, ext.Tool{Name: "notes/add"}); d.Effect != "allow" || d.Rule != "rules[0]" {
		t.Errorf("allow rule under default deny: %+v", d)
	}
	var none *host.PolicyConfig
	if d := none.Decide("x", nil, ext.Tool{Name: "a/b", Annotations: destr}); d.Effect != "allow" {
		t.Errorf("no policy: %+v", d)
	}
}

// TestPolicyConfig: a bad policy block is refused with errors naming the
// rule and the field; config check's description names each rule.
func TestPolicyConfig(t *testing.T) {
	bad := `{"extensions":{},"policy":{"default":"maybe","maxApprovalMinutes":5000,"rules":[
		{"name":"r1","users":["alice"],"tools":["notes/["],"effect":"deny"},
		{"name":"r2","users":[],"tools":["a/*"],"effect":"allow"},
		{"users":["group:"],"tools":["a/*"],"effect":"block"},
		{"name":"r1","users":["bob"],"tools":["x/*"],"effect":"deny"}]}}`
	_, err := host.ParseConfig([]byte(bad), t.TempDir())
	if err == nil {
		t.Fatal("a bad policy was accepted")
	}
	for _, want := range []string{
		`policy.default: "maybe"`, `policy.maxApprovalMinutes: 5000`,
		`policy.rules[0] "r1": tools: "notes/["`, `policy.rules[1] "r2": users`,
		`policy.rules[2] "rules[2]": effect "block"`, `policy.rules[2] "rules[2]": users: "group:" names no group`,
		`policy.rules[3] "r1": the name is taken by rules[0]`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := host.ParseConfig([]byte(`{"extensions":{},"policy":{"rules":[{"users":["a"],"tools":["b/*"],"effect":"deny","what":1}]}}`), t.TempDir()); err == nil || !strings.Contains(err.Error(), "what") {
		t.Errorf("an unknown field: %v", err)
	}
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"policy":{"approveDestructive":true,"rules":[
		{"name":"no-everything-for-alice","users":["alice"],"tools":["everything/*"],"effect":"deny"}]}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	desc := strings.Join(cfg.Policy.Describe(), "\n")
	for _, want := range []string{"first matching rule wins", "approveDestructive true", "1. no-everything-for-alice: deny tools everything/* for alice"} {
		if !strings.Contains(desc, want) {
			t.Errorf("Describe lacks %q:\n%s", want, desc)
		}
	}
	if _, err := host.New(context.Background(), &host.Config{Policy: &host.PolicyConfig{Rules: []host.PolicyRule{{Users: []string{"a"}, Effect: "deny"}}}}, nil); err == nil {
		t.Error("host.New took a bad policy built in Go")
	}
}

// askingSession is a client session that declared elicitation and
// answers each request with answer, counting the requests.
type askingSession struct {
	mu     sync.Mutex
	answer string
	asked  []string
}

func (s *askingSession) Capabilities() json.RawMessage { return json.RawMessage(`{"elicitation":{}}`) }
func (s *askingSession) Notify(context.Context, string, json.RawMessage) error {
	return nil
}
func (s *askingSession) Request(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, method+" "+string(params))
	return json.RawMessage(s.answer), nil
}

// TestPolicyEveryPath: a denied tool is absent from the user's list and
// an unknown tool when called, through the Go API and UserActor alike,
// while another user has it; a group's rule follows the user's groups
// (whose change tells the user's sessions to list again); a
// call under "approve" asks an eliciting client (accept runs it, decline
// refuses it), and without one waits for the user's approval (once: the
// retry runs once; for N minutes: the tool runs meanwhile, through
// UserActor too; deny: the retry is refused).
func TestPolicyEveryPath(t *testing.T) {
	ctx := context.Background()
	te := &testExt{}
	cfg := &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}, Policy: &host.PolicyConfig{
		Rules: []host.PolicyRule{
			{Name: "no-echo-for-alice", Users: []string{"alice"}, Tools: []string{"t/echo"}, Effect: "deny"},
			{Name: "no-env-for-interns", Users: []string{"group:interns"}, Tools: []string{"t/env"}, Effect: "deny"},
			{Name: "ask-greet", Users: []string{"*"}, Tools: []string{"t/greet"}, Effect: "approve"},
		}}}
	h, err := host.New(ctx, cfg, &host.Options{Extensions: map[string]host.InProcess{"t": {Extension: te, ActAsUsers: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	te.mu.Lock()
	ua := te.host.(ext.UserActor)
	te.mu.Unlock()
	has := func(user, name string) bool {
		tools, err := h.Tools(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools {
			if tl.Name == name {
				return true
			}
		}
		return false
	}
	if has("alice", "t/echo") || !has("bob", "t/echo") || !has("alice", "t/greet") {
		t.Error("alice's list has t/echo, or bob's lacks it, or alice's lacks t/greet")
	}
	if _, err := h.Call(ctx, "alice", "", "t/echo", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("alice calls t/echo: %v, want ErrNotFound", err)
	}
	if res, err := h.Call(ctx, "bob", "", "t/echo", json.RawMessage(`{}`)); err != nil || res.IsError {
		t.Errorf("bob calls t/echo: %v %v", res, err)
	}
	if tools, err := ua.ListToolsAs(ctx, "alice", nil); err != nil || len(tools) == 0 || strings.Contains(toolNames(tools), "t/echo") {
		t.Errorf("ListToolsAs alice = %s, %v", toolNames(tools), err)
	}
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "t/echo"}); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("CallToolAs alice t/echo: %v, want ErrNotFound", err)
	}
	if !has("carol", "t/env") {
		t.Error("carol lacks t/env before she is an intern")
	}
	events, cancel := h.Subscribe(ctx, "carol")
	defer cancel()
	for len(events) > 0 {
		<-events
	}
	if err := h.SetUserGroups(ctx, "carol", []string{"interns"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events: // raised within SetUserGroups
	default:
		t.Error("carol's sessions heard no tools change when her groups (and so her policy) changed")
	}
	if has("carol", "t/env") {
		t.Error("carol the intern has t/env")
	}
	if _, err := h.Call(ctx, "carol", "", "t/env", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("carol the intern calls t/env: %v", err)
	}

	// Approval: an eliciting client is asked.
	yes := &askingSession{answer: `{"action":"accept","content":{"decision":"approve"}}`}
	if res, err := h.CallTool(ctx, &host.CallRequest{User: "bob", Name: "t/greet", Arguments: json.RawMessage(`{"name":"x"}`), Session: yes}); err != nil || res.IsError {
		t.Errorf("approved through elicitation: %v %v", res, err)
	}
	if len(yes.asked) != 1 || !strings.Contains(yes.asked[0], ext.MethodElicit) || !strings.Contains(yes.asked[0], `t/greet`) || !strings.Contains(yes.asked[0], `\"name\":\"x\"`) {
		t.Errorf("the client was asked %q", yes.asked)
	}
	no := &askingSession{answer: `{"action":"decline"}`}
	var ar *host.ApprovalRequired
	if _, err := h.CallTool(ctx, &host.CallRequest{User: "bob", Name: "t/greet", Session: no}); !errors.As(err, &ar) || !ar.Denied || !errors.Is(err, ext.ErrPermission) {
		t.Errorf("declined through elicitation: %v", err)
	}

	// Without a client to ask: a pending approval on the settings page.
	h.SetApprovalLink(func() string { return "https://agenthost.example/settings" })
	_, err = h.Call(ctx, "bob", "", "t/greet", json.RawMessage(`{"name": "bob"}`))
	if !errors.As(err, &ar) || ar.ID == "" || ar.URL != "https://agenthost.example/settings#approval-"+ar.ID {
		t.Fatalf("a call without a client: %v (%+v)", err, ar)
	}
	first := ar.ID
	if _, err := h.Call(ctx, "bob", "", "t/greet", json.RawMessage(`{"name":"bob"}`)); !errors.As(err, &ar) || ar.ID != first {
		t.Errorf("the same call again: %v, want the same pending approval %s", err, first)
	}
	if list, _ := h.Approvals(ctx, "alice"); len(list) != 0 {
		t.Errorf("alice sees bob's approvals: %+v", list)
	}
	if err := h.DecideApproval(ctx, "alice", first, true, 0); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("alice approves bob's call: %v", err)
	}
	list, _ := h.Approvals(ctx, "bob")
	if len(list) != 1 || list[0].ID != first || list[0].Tool != "t/greet" || list[0].Arguments != `{"name":"bob"}` || list[0].Rule != "ask-greet" {
		t.Fatalf("bob's approvals: %+v", list)
	}
	if err := h.DecideApproval(ctx, "bob", first, true, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(ctx, "bob", "", "t/greet", json.RawMessage(`{"name":"other"}`)); !errors.As(err, &ar) {
		t.Errorf("another call than the approved one: %v", err)
	}
	if res, err := h.Call(ctx, "bob", "", "t/greet", json.RawMessage(`{"name":"bob"}`)); err != nil || res.IsError {
		t.Errorf("the approved call's retry: %v %v", res, err)
	}
	if _, err := h.Call(ctx, "bob", "", "t/greet", json.RawMessage(`{"name":"bob"}`)); !errors.As(err, &ar) {
		t.Errorf("approved once, called twice: %v", err)
	}
	if err := h.DecideApproval(ctx, "bob", ar.ID, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(ctx, "bob", "", "t/greet", json.RawMessage(`{"name":"bob"}`)); !errors.As(err, &ar) || !ar.Denied {
		t.Errorf("the denied call's retry: %v", err)
	}

	// UserActor: refused with the reason, until a window is open.
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "t/greet"}); !errors.As(err, &ar) || ar.ID == "" {
		t.Fatalf("CallToolAs alice t/greet: %v", err)
	}
	if err := h.DecideApproval(ctx, "alice", ar.ID, true, 100000); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("a window beyond maxApprovalMinutes: %v", err)
	}
	if err := h.DecideApproval(ctx, "alice", ar.ID, true, 10); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if res, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "t/greet", Arguments: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`)}); err != nil || res.IsError {
			t.Errorf("CallToolAs within alice's window: %v %v", res, err)
		}
	}
	if _, err := h.Call(ctx, "bob", "", "t/greet", nil); !errors.As(err, &ar) {
		t.Errorf("alice's window opened bob's: %v", err)
	}

	// A user's waiting calls are bounded: the oldest go.
	var ids []string
	for i := range 60 {
		_, err := h.Call(ctx, "dave", "", "t/greet", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
		if !errors.As(err, &ar) {
			t.Fatalf("dave's call %d: %v", i, err)
		}
		ids = append(ids, ar.ID)
	}
	list, _ = h.Approvals(ctx, "dave")
	if len(list) != 50 || list[0].ID != ids[10] || list[49].ID != ids[59] {
		t.Errorf("dave has %d waiting calls, from %v; want the newest 50", len(list), list[0].ID)
	}
}

func toolNames(tools []ext.Tool) string {
	var b strings.Builder
	for _, t := range tools {
		b.WriteString(t.Name + " ")
	}
	return b.String()
}

// BenchmarkPolicyDecide is the policy's cost per tool of a list or a
// call: 20 rules, the matching one last, beside no policy.
func BenchmarkPolicyDecide(b *testing.B) {
	p := &host.PolicyConfig{ApproveDestructive: true}
	for i := range 19 {
		p.Rules = append(p.Rules, host.PolicyRule{Users: []string{"group:g" + string(rune('a'+i))}, Tools: []string{"srv" + string(rune('a'+i)) + "/*"}, Effect: "deny"})
	}
	p.Rules = append(p.Rules, host.PolicyRule{Users: []string{"*"}, Tools: []string{"notes/*"}, Effect: "allow"})
	tool := ext.Tool{Name: "notes/add_note", Annotations: json.RawMessage(`{"destructiveHint":false}`)}
	groups := []string{"eng", "ops"}
	b.Run("none", func(b *testing.B) {
		var none *host.PolicyConfig
		for b.Loop() {
			none.Decide("alice", groups, tool)
		}
	})
	b.Run("20rules", func(b *testing.B) {
		for b.Loop() {
			p.Decide("alice", groups, tool)
		}
	})
}
