package e2e_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// runnerEnv is a host with ext-mcp (alice's notes, with its resource;
// her second server other; bob's opt-in private) and ext-runner (granted
// actAsUsers), whose one profile "fake" starts examples/fakeagent as
// Claude Code's CLI would be started. runners is the runners block.
type runnerEnv struct {
	*env
	agent    string // the fakeagent binary
	tokenOut string // where the fake agent writes the tokens it was given
}

func newRunnerEnv(t *testing.T, runners map[string]any) *runnerEnv {
	t.Helper()
	b := build(t)
	runner := testbin.Build(t, pkg+"ext-runner/cmd/agenthost-ext-runner")
	agent := testbin.Build(t, pkg+"examples/fakeagent")
	tokenOut := filepath.Join(t.TempDir(), "tokens")
	servers := map[string]any{"mcpServers": map[string]any{
		"notes":   map[string]any{"command": b.notes, "args": []string{"-resource"}},
		"other":   map[string]any{"command": b.notes},
		"private": map[string]any{"command": b.notes, "availability": "opt-in"},
	}}
	e := newEnv(t, b, servers, map[string]any{"extensions": map[string]any{"runner": map[string]any{
		"path": runner, "actAsUsers": true,
		// The extension's own environment: AGENT_KEY is named by the
		// profile, NOT_FOR_AGENT is not.
		"env": map[string]string{"AGENT_KEY": "key-for-the-agent", "NOT_FOR_AGENT": "host-side-secret"},
		"config": map[string]any{
			"maxProcesses": 4,
			"profiles": map[string]any{"boxed": map[string]any{
				"command": agent, "sandbox": true,
				"args": []string{"-p", "{prompt}", "--mcp-config", "{mcpConfig}"},
			}, "fake": map[string]any{
				"command": agent,
				"args": []string{"-p", "{prompt}", "--mcp-config", "{mcpConfig}", "--strict-mcp-config",
					"--allowedTools", "{allowedTools}", "--disallowedTools", "Bash,Read,Write,Edit", "--max-turns", "{maxTurns}"},
				"maxTurns": 7,
				"env": map[string]any{
					"AGENT_KEY":           map[string]string{"env": "AGENT_KEY"},
					"MODE":                map[string]string{"value": "test"},
					"FAKEAGENT_TOKEN_OUT": map[string]string{"value": tokenOut},
				},
			}},
			"runners": runners,
		},
	}}})
	// A variable of the host's own environment: it must reach no agent.
	e.serveEnv = []string{"HOST_CANARY=host-env-secret"}
	e.startServe()
	return &runnerEnv{env: e, agent: agent, tokenOut: tokenOut}
}

// runnerStatus returns the status entry of runner name (from agenthost
// status --json).
func (e *runnerEnv) runnerStatus(name string) (state, detail string, actions []string) {
	e.t.Helper()
	var out struct {
		Status []struct {
			Extension, Name, State, Detail, Reason string
			Actions                                []string
		}
	}
	if err := json.Unmarshal([]byte(e.must("", "status", "--json")), &out); err != nil {
		e.t.Fatal(err)
	}
	for _, s := range out.Status {
		if s.Extension == "runner" && s.Name == name {
			if s.State == "off" {
				return s.State, s.Reason, s.Actions
			}
			return s.State, s.Detail, s.Actions
		}
	}
	e.t.Fatalf("no status entry for runner %s", name)
	return "", "", nil
}

// runs counts the finished runs a runner's status lists.
func runs(detail string) []string {
	var out []string
	for _, l := range strings.Split(detail, "\n") {
		if strings.HasPrefix(l, "run ") {
			out = append(out, l)
		}
	}
	return out
}

// waitRuns waits until runner name has n finished runs and nothing running.
func (e *runnerEnv) waitRuns(name string, n int) string {
	e.t.Helper()
	var detail, state string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		state, detail, _ = e.runnerStatus(name)
		if len(runs(detail)) >= n && state == "idle" {
			return detail
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Fatalf("runner %s: want %d finished runs, status %s:\n%s", name, n, state, detail)
	return ""
}

// tokens returns the tokens the fake agent was given, in order.
func (e *runnerEnv) tokens() []string {
	b, _ := os.ReadFile(e.tokenOut)
	return strings.Fields(string(b))
}

// agentsRunning lists the PIDs of live fakeagent processes.
func agentsRunning(t *testing.T, bin string) []int {
	t.Helper()
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink("/proc/" + d.Name() + "/exe"); err == nil && exe == bin {
			if st, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie is dead, waiting for its reaper
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRunnerRunNow: alice's runner limited to notes, run now from the CLI
// (as the operator) and from the JSON API (alice's own token; bob's is
// refused): the fake agent, started as claude -p with the profile's
// argv, sees exactly notes's tools (not alice's other server, not bob's),
// calls add_note (the note is alice's), and exits 0; the token it was
// given is refused on /mcp after the session; its environment holds
// PATH, HOME and the profile's variables only (not the host's, not the
// extension's others); the status shows the run, its exit status and the
// tail of its output.
func TestRunnerRunNow(t *testing.T) {
	e := newRunnerEnv(t, map[string]any{
		"notes-agent": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "2m",
			"prompt": `env; call notes__add_note {"text":"written by the runner"}`},
		// A broken runner is reported, and does not stop the others.
		"broken": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "nope", "prompt": "x"},
	})
	e.must("", "settings", "set", "--user", "bob", "--ext", "mcp", "servers", `{"private":true}`)
	if state, reason, _ := e.runnerStatus("broken"); state != "off" || !strings.Contains(reason, `profile "nope"`) {
		t.Errorf("the broken runner: %s %q, want off naming its profile", state, reason)
	}
	if _, errOut, code := e.run("", "runner", "run", "broken", "--user", "alice"); code == 0 {
		t.Errorf("run now of an off runner succeeded")
	} else if !strings.Contains(errOut, "no action") {
		t.Errorf("run now of an off runner: %s", errOut)
	}

	out := e.must("", "runner", "run", "notes-agent", "--user", "alice")
	if !strings.Contains(out, "started") {
		t.Errorf("runner run: %q", out)
	}
	detail := e.waitRuns("notes-agent", 1)
	if !strings.Contains(detail, "by run now (operator): ok") || !strings.Contains(detail, "exit status 0") {
		t.Errorf("the run's status:\n%s", detail)
	}
	var lines []map[string]any
	for _, l := range strings.Split(detail, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "output:"))
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			lines = append(lines, m)
		}
	}
	find := func(key string) map[string]any {
		for _, m := range lines {
			if _, ok := m[key]; ok {
				return m
			}
		}
		t.Fatalf("the agent's output has no %q line:\n%s", key, detail)
		return nil
	}
	// The argv the profile built.
	argv := strings.Join(toStrings(find("argv")["argv"]), " ")
	if argv != "--strict-mcp-config --allowedTools mcp__agenthost --disallowedTools Bash,Read,Write,Edit --max-turns 7" {
		t.Errorf("agent argv: %s", argv)
	}
	// Exactly notes's tools.
	full := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "full"))
	c, err := connect(t, e.url, full)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range c.names(t) {
		if strings.HasPrefix(n, "notes__") {
			want = append(want, n)
		}
	}
	slices.Sort(want)
	got := toStrings(find("tools")["tools"])
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("the agent's tools = %v, want notes's only: %v", got, want)
	}
	if called := find("called"); called["isError"] != false {
		t.Errorf("the agent's call: %v", called)
	}
	if r, err := c.call(t, "notes__list_notes", map[string]any{}); err != nil || !strings.Contains(text(r)+mustJSON(r.StructuredContent), "written by the runner") {
		t.Errorf("alice's notes after the run: %v %v", err, r)
	}
	// The environment: PATH, HOME and what the profile names.
	env := toStrings(find("env")["env"])
	var names []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		names = append(names, k)
		if k == "AGENT_KEY" && v != "key-for-the-agent" {
			t.Errorf("AGENT_KEY = %q", v)
		}
	}
	if !slices.Equal(names, []string{"AGENT_KEY", "FAKEAGENT_TOKEN_OUT", "HOME", "MODE", "PATH"}) {
		t.Errorf("the agent's environment names %v, want AGENT_KEY FAKEAGENT_TOKEN_OUT HOME MODE PATH only", names)
	}
	if strings.Contains(strings.Join(env, "\n"), "host-env-secret") || strings.Contains(strings.Join(env, "\n"), "host-side-secret") {
		t.Errorf("the agent's environment holds the host's or the extension's variables: %v", env)
	}
	// The token is dead after the session.
	toks := e.tokens()
	if len(toks) != 1 {
		t.Fatalf("the agent was given %d tokens, want 1", len(toks))
	}
	if _, err := connect(t, e.url, toks[0]); err == nil {
		t.Errorf("the session's token still opens /mcp after the session")
	}

	// Run now from the JSON API: alice's own runner, with her token; bob
	// may not run it, and learns nothing of it.
	bobTok := strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "api"))
	aliceTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "api"))
	post := func(tok, path, body string) (int, string) {
		req, _ := http.NewRequest("POST", e.url+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := post(bobTok, "/api/v1/extensions/runner/actions/run", `{"name":"notes-agent"}`); code != http.StatusNotFound {
		t.Errorf("bob runs alice's runner: %d %s, want 404", code, body)
	}
	if code, body := post(bobTok, "/api/v1/extensions/runner/actions/run", `{"name":"notes-agent","user":"alice"}`); code != http.StatusNotFound {
		t.Errorf("bob runs alice's runner naming her: %d %s, want 404", code, body)
	}
	if code, body := post(aliceTok, "/api/v1/extensions/runner/actions/run", `{"name":"notes-agent"}`); code != http.StatusOK || !strings.Contains(body, "started") {
		t.Errorf("alice runs her runner: %d %s", code, body)
	}
	detail = e.waitRuns("notes-agent", 2)
	if !strings.Contains(detail, "by run now: ok") {
		t.Errorf("the API's run:\n%s", detail)
	}
	if toks := e.tokens(); len(toks) != 2 || toks[0] == toks[1] {
		t.Errorf("the second session's token: %d tokens, want a new one", len(toks))
	} else if _, err := connect(t, e.url, toks[1]); err == nil {
		t.Errorf("the second session's token still opens /mcp")
	}
	// The operator's API names the user.
	opTok := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "op"))
	if code, body := post(opTok, "/api/operator/v1/extensions/runner/actions/run", `{"name":"notes-agent","user":"alice"}`); code != http.StatusOK {
		t.Errorf("the operator runs alice's runner: %d %s", code, body)
	}
	e.waitRuns("notes-agent", 3)
	if audit := e.must("", "audit", "--kind", "action"); !strings.Contains(audit, "runner/notes-agent:run") {
		t.Errorf("the audit log has no record of the actions:\n%s", audit)
	}
	// The sessions' tokens: issued and revoked in the audit log, and the
	// agent's call recorded under the token it was given.
	issued, revoked := map[string]bool{}, map[string]bool{}
	var calls []string
	for _, l := range strings.Split(strings.TrimSpace(e.must("", "audit", "--json", "--user", "alice")), "\n") {
		var r struct{ Kind, Credential, Tool string }
		if json.Unmarshal([]byte(l), &r) != nil {
			continue
		}
		switch {
		case r.Kind == "token" && r.Tool == "token issued":
			issued[r.Credential] = true
		case r.Kind == "token" && r.Tool == "token revoked":
			revoked[r.Credential] = true
		case r.Kind == "tool" && r.Tool == "notes/add_note":
			calls = append(calls, r.Credential)
		}
	}
	sessions := 0
	for c := range revoked {
		if issued[c] && slices.ContainsFunc(calls, func(cred string) bool { return strings.HasSuffix(cred, c) }) {
			sessions++
		}
	}
	if sessions != 3 {
		t.Errorf("audit: %d session tokens issued, revoked and used for the call, want 3 (issued %v, revoked %v, calls %v)", sessions, issued, revoked, calls)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestRunnerTimeLimitAndQueue: a hung agent is killed (its process group)
// at the time limit and its token is revoked; triggers during a run give
// exactly one more run (the third is not queued again); afterwards no
// agent process is left.
func TestRunnerTimeLimitAndQueue(t *testing.T) {
	e := newRunnerEnv(t, map[string]any{
		"hang": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "3s", "prompt": "hang"},
	})
	var said []string
	for range 3 {
		said = append(said, strings.TrimSpace(e.must("", "runner", "run", "hang", "--user", "alice")))
	}
	if !strings.HasSuffix(said[0], "started") || !strings.HasSuffix(said[1], ": queued") || !strings.HasSuffix(said[2], "already queued") {
		t.Errorf("three triggers said %q, want started, queued, already queued", said)
	}
	detail := e.waitRuns("hang", 2)
	// Nothing more comes: the queue held one.
	time.Sleep(500 * time.Millisecond)
	_, detail2, _ := e.runnerStatus("hang")
	if r := runs(detail2); len(r) != 2 {
		t.Errorf("runs after three triggers: %d, want 2:\n%s", len(r), detail2)
	}
	for _, r := range runs(detail) {
		if !strings.Contains(r, "killed at time limit") {
			t.Errorf("a hung run ended %q, want killed at time limit", r)
		}
	}
	toks := e.tokens()
	if len(toks) != 2 {
		t.Fatalf("%d tokens given, want 2", len(toks))
	}
	for _, tok := range toks {
		if _, err := connect(t, e.url, tok); err == nil {
			t.Errorf("a killed session's token still opens /mcp")
		}
	}
	if pids := agentsRunning(t, e.agent); len(pids) > 0 {
		t.Errorf("agent processes left after the time limit: %v", pids)
	}
}

// TestRunnerScheduleAndResource: a runner on a schedule runs by itself;
// a runner subscribed to alice's notes://notes runs when a note is added
// (notifications/resources/updated through the host's /mcp).
func TestRunnerScheduleAndResource(t *testing.T) {
	e := newRunnerEnv(t, map[string]any{
		"cron": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "1m",
			"prompt": "exit 0", "schedule": "@every 2s"},
		"watch": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "1m",
			"prompt": "call notes__list_notes {}", "resource": map[string]any{"server": "notes", "uri": "notes://notes"}},
	})
	detail := e.waitRuns("cron", 1)
	if !strings.Contains(detail, "by schedule: ok") {
		t.Errorf("the scheduled run:\n%s", detail)
	}
	// The watcher subscribes, then a note of alice's wakes it.
	eventually(t, "the watcher subscribed", func() bool {
		_, d, _ := e.runnerStatus("watch")
		return strings.Contains(d, "(subscribed)")
	})
	e.must("", "call", "--user", "alice", "notes/add_note", `{"text":"wake up"}`)
	detail = e.waitRuns("watch", 1)
	if !strings.Contains(detail, "by resource notes://notes: ok") || !strings.Contains(detail, "wake up") {
		t.Errorf("the resource's run:\n%s", detail)
	}
}

// TestRunnerCrash: ext-runner killed with SIGKILL mid-session leaves no
// agent process (the parent-death signal) and no live token (the
// restarted extension revokes what its ledger lists).
func TestRunnerCrash(t *testing.T) {
	e := newRunnerEnv(t, map[string]any{
		"hang": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "10m", "prompt": "hang"},
	})
	e.must("", "runner", "run", "hang", "--user", "alice")
	eventually(t, "the agent runs and has its token", func() bool {
		return len(e.tokens()) == 1 && len(agentsRunning(t, e.agent)) == 1
	})
	tok := e.tokens()[0]
	if _, err := connect(t, e.url, tok); err != nil {
		t.Fatalf("the running session's token: %v", err)
	}
	var infos []struct {
		Name string
		PID  int
	}
	if err := json.Unmarshal([]byte(e.must("", "ext", "list", "--json")), &infos); err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, i := range infos {
		if i.Name == "runner" {
			pid = i.PID
		}
	}
	if pid == 0 {
		t.Fatalf("no PID for ext-runner: %v", infos)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no agent process left", func() bool { return len(agentsRunning(t, e.agent)) == 0 })
	eventually(t, "the session's token refused", func() bool {
		_, err := connect(t, e.url, tok)
		return err != nil
	})
}

// TestRunnerButtonInABrowser: in headless Chromium alice's settings page
// lists her runner in its status with a Run now button; clicking it
// starts a session (the page says so), whose run the page then shows
// with the tail of the agent's output; the note it added is hers.
func TestRunnerButtonInABrowser(t *testing.T) {
	needChromium(t)
	e := newRunnerEnv(t, map[string]any{
		"notes-agent": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "2m",
			"prompt": `call notes__add_note {"text":"from the button"}`},
		"bobs": map[string]any{"user": "bob", "servers": []string{"notes"}, "profile": "fake", "prompt": "exit 0"},
	})
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))
	ctx := newBrowser(t)
	do, text := browserSteps(ctx, t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	do("sign in with the link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(css(`#continue`)),
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(`#status`)),
	)
	if s := text("the status section", chromedp.Text(css(`#status`))); strings.Contains(s, "bobs") || !strings.Contains(s, "notes-agent") {
		t.Errorf("alice's status section:\n%s", s)
	}
	do("click Run now",
		chromedp.Click(css(`button[aria-label="run notes-agent"]`)),
		chromedp.WaitVisible(css(`p.flash`)),
	)
	if f := text("the page's answer", chromedp.Text(css(`p.flash`))); f != "notes-agent: started" {
		t.Errorf("after Run now the page says %q", f)
	}
	e.waitRuns("notes-agent", 1)
	do("reload the settings page",
		chromedp.Navigate(e.url+"/settings"),
		chromedp.WaitVisible(css(`#status pre.detail`)),
	)
	if d := text("the runner's detail", chromedp.Text(css(`#status pre.detail`))); !strings.Contains(d, "by run now: ok") || !strings.Contains(d, `"called":"notes__add_note"`) {
		t.Errorf("the runner's detail on the page:\n%s", d)
	}
	if out := e.must("", "call", "--user", "alice", "notes/list_notes", "{}"); !strings.Contains(out, "from the button") {
		t.Errorf("alice's notes: %s", out)
	}
}

// TestRunnerSandbox: an agent of a profile with sandbox: true (bubblewrap)
// sees neither the host's config file nor its data folder's files, while
// the same agent unsandboxed sees both; it still reaches the host's /mcp
// and calls its tool.
func TestRunnerSandbox(t *testing.T) {
	needSandbox(t)
	var e *runnerEnv
	prompt := func() string {
		return "stat " + e.cfg + "; stat " + filepath.Join(e.dir, "data", "auth.db") + `; call notes__add_note {"text":"from the sandbox"}`
	}
	// The runners' prompts name the env's own paths: declare them after
	// the env exists, through a second start.
	e = newRunnerEnv(t, map[string]any{})
	e.stopServe()
	raw, err := os.ReadFile(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	rc := cfg["extensions"].(map[string]any)["runner"].(map[string]any)["config"].(map[string]any)
	rc["runners"] = map[string]any{
		"boxed": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "boxed", "prompt": prompt()},
		"open":  map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "prompt": prompt()},
	}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(e.cfg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e.startServe()
	stats := func(name string) map[string]bool {
		e.must("", "runner", "run", name, "--user", "alice")
		detail := e.waitRuns(name, 1)
		if !strings.Contains(detail, ": ok") || !strings.Contains(detail, `"called":"notes__add_note","isError":false`) {
			t.Errorf("runner %s:\n%s", name, detail)
		}
		out := map[string]bool{}
		for _, l := range strings.Split(detail, "\n") {
			var m struct {
				Stat   string
				Exists bool
			}
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "output:"))
			if json.Unmarshal([]byte(l), &m) == nil && m.Stat != "" {
				out[m.Stat] = m.Exists
			}
		}
		return out
	}
	open, boxed := stats("open"), stats("boxed")
	for _, p := range []string{e.cfg, filepath.Join(e.dir, "data", "auth.db")} {
		if !open[p] {
			t.Errorf("unsandboxed, the agent does not see %s (the control is broken): %v", p, open)
		}
		if v, ok := boxed[p]; !ok || v {
			t.Errorf("sandboxed, the agent sees %s (or said nothing of it): %v", p, boxed)
		}
	}
}

// TestUserRunners: with allowUserRunners, alice declares a runner of her
// own in her settings (choosing the operator's profile), and runs it from
// the JSON API: it acts as her, within its servers; a runner naming a
// profile the operator has none of, or another user, is refused before
// it is stored; bob cannot run hers.
func TestUserRunners(t *testing.T) {
	e := newRunnerEnv(t, map[string]any{})
	e.stopServe()
	raw, err := os.ReadFile(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	_ = json.Unmarshal(raw, &cfg)
	cfg["extensions"].(map[string]any)["runner"].(map[string]any)["config"].(map[string]any)["allowUserRunners"] = true
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(e.cfg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e.startServe()

	set := func(user, runners string) (string, int) {
		v, _ := json.Marshal(map[string]string{"runners": runners})
		_, errOut, code := e.run("", "settings", "set", "--user", user, "--ext", "runner", "runners", string(v))
		return errOut, code
	}
	if errOut, code := set("alice", `{"x":{"servers":["notes"],"profile":"own","prompt":"p"}}`); code == 0 || !strings.Contains(errOut, `profile "own": no such profile`) {
		t.Errorf("a runner with a profile the operator has none of: %d %s", code, errOut)
	}
	if errOut, code := set("alice", `{"x":{"user":"bob","servers":["notes"],"profile":"fake","prompt":"p"}}`); code == 0 || !strings.Contains(errOut, "act as you") {
		t.Errorf("alice's runner acting as bob: %d %s", code, errOut)
	}
	if errOut, code := set("alice", `{"mine":{"servers":["notes"],"profile":"fake","prompt":"call notes__add_note {\"text\":\"alice's own runner\"}"}}`); code != 0 {
		t.Fatalf("alice's runner: %s", errOut)
	}
	aliceTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "api"))
	bobTok := strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "api"))
	post := func(tok string) (int, string) {
		req, _ := http.NewRequest("POST", e.url+"/api/v1/extensions/runner/actions/run", strings.NewReader(`{"name":"mine"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := post(bobTok); code != http.StatusNotFound {
		t.Errorf("bob runs alice's own runner: %d %s", code, body)
	}
	var code int
	var body string
	eventually(t, "alice's runner is known (her activation read it)", func() bool {
		code, body = post(aliceTok)
		return code == http.StatusOK
	})
	if !strings.Contains(body, "started") {
		t.Errorf("alice runs her runner: %d %s", code, body)
	}
	detail := e.waitRuns("mine", 1)
	if !strings.Contains(detail, "by run now: ok") || !strings.Contains(detail, `"tools":["notes__`) || strings.Contains(detail, "other__") {
		t.Errorf("alice's own runner's run:\n%s", detail)
	}
	if out := e.must("", "call", "--user", "alice", "notes/list_notes", "{}"); !strings.Contains(out, "alice's own runner") {
		t.Errorf("alice's notes: %s", out)
	}
}

// cgroupsHere says why no cgroup can be made under this process's cgroup
// in the v2 hierarchy (where ext-runner, this test's grandchild, makes its
// sessions' cgroups), or nil.
func cgroupsHere() error {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	mount := ""
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && slices.Contains(f, "cgroup2") && f[3] == "/" {
			mount = f[4]
		}
	}
	if mount == "" {
		return errors.New("no cgroup v2 hierarchy mounted")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	own := ""
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	probe := filepath.Join(mount, own, "agenthost-e2e-probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fmt.Errorf("this process's cgroup is not delegated to it: %w", err)
	}
	return os.Remove(probe)
}

// TestRunnerCgroup: an unsandboxed agent that starts a daemon (setsid:
// out of its process group, stdio closed) and hangs is killed at the time
// limit with its daemon: each session has a cgroup of its own, killed
// whole; the status says killed at time limit.
func TestRunnerCgroup(t *testing.T) {
	needPart(t, "a cgroup v2 hierarchy this process may create cgroups in", cgroupsHere())
	e := newRunnerEnv(t, map[string]any{
		"escape": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "3s", "prompt": "escape; hang"},
	})
	e.must("", "runner", "run", "escape", "--user", "alice")
	eventually(t, "the agent and its daemon run", func() bool { return len(agentsRunning(t, e.agent)) == 2 })
	for _, pid := range agentsRunning(t, e.agent) {
		if err := inCgroup(pid); err != nil {
			t.Errorf("agent process %d: %v", pid, err)
		}
	}
	detail := e.waitRuns("escape", 1)
	t.Logf("the run:\n%s", detail)
	if r := runs(detail); len(r) != 1 || !strings.Contains(r[0], "killed at time limit") || !strings.Contains(detail, `"escaped"`) {
		t.Errorf("the run:\n%s", detail)
	}
	if pids := agentsRunning(t, e.agent); len(pids) > 0 {
		t.Errorf("agent processes left after the time limit (the daemon escaped): %v", pids)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestRunnerAudit: a runner session's start (its token minted) and end
// (its token revoked, with how the session ended: ok, killed at time
// limit) are in `agenthost audit` under kind extension, naming the
// extension and the runner's user, never the token.
func TestRunnerAudit(t *testing.T) {
	e := newRunnerEnv(t, map[string]any{
		"quick": map[string]any{"user": "alice", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "1m", "prompt": "exit 0"},
		"hang":  map[string]any{"user": "bob", "servers": []string{"notes"}, "profile": "fake", "timeLimit": "3s", "prompt": "hang"},
	})
	e.must("", "runner", "run", "quick", "--user", "alice")
	e.must("", "runner", "run", "hang", "--user", "bob")
	e.waitRuns("quick", 1)
	e.waitRuns("hang", 1)
	want := map[string]bool{
		"alice token minted: runner:quick":                                   false,
		"alice token revoked: runner:quick session ended: ok":                false,
		"bob token minted: runner:hang":                                      false,
		"bob token revoked: runner:hang session ended: killed at time limit": false,
	}
	recs := e.auditLines("--kind", "extension")
	for _, r := range recs {
		if r.Credential != "ext:runner" || r.Server != "runner" {
			t.Errorf("an extension record not naming ext-runner: %+v", r)
		}
		for _, tok := range e.tokens() {
			if strings.Contains(r.Reason, tok) {
				t.Errorf("an audit record holds a token: %+v", r)
			}
		}
		for k := range want {
			user, rest, _ := strings.Cut(k, " ")
			tool, why, _ := strings.Cut(rest, " session ended: ")
			if r.User == user && r.Tool == tool && (why == "" || strings.HasSuffix(r.Reason, "session ended: "+why)) {
				want[k] = true
			}
		}
	}
	for k, ok := range want {
		if !ok {
			t.Errorf("no audit record %q in:\n%+v", k, recs)
		}
	}
}
