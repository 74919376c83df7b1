package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// codeOutcome is code__run's structuredContent.
type codeOutcome struct {
	Value json.RawMessage `json:"value"`
	Logs  []string        `json:"logs"`
	Calls []struct {
		Tool, Outcome, Error string
	} `json:"calls"`
	Error *struct {
		Message string `json:"message"`
		Line    int    `json:"line"`
		Limit   string `json:"limit"`
	} `json:"error"`
}

func runCode(t *testing.T, ctx context.Context, c *client, code string, meta mcp.Meta) (*mcp.CallToolResult, codeOutcome, error) {
	t.Helper()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "code__run", Arguments: map[string]any{"code": code}, Meta: meta})
	var o codeOutcome
	if err == nil {
		b, _ := json.Marshal(res.StructuredContent)
		if jerr := json.Unmarshal(b, &o); jerr != nil {
			t.Fatalf("code__run's structuredContent %s: %v", b, jerr)
		}
	}
	return res, o, err
}

// vmRSS returns a process's resident set in KiB.
func vmRSS(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the host's resident set cannot be read (no /proc): %v", err)
		}
		t.Skipf("SKIPPING THE RSS BOUND OF HOSTILE SCRIPTS: no /proc (%v); under CI=true this fails", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// TestCodeModeEndToEnd runs the real host, ext-mcp, ext-codemode, the
// notes server and server-everything: a go-sdk client on /mcp sees
// code__run (with the declarations of server-everything's and the notes
// server's codemode tools, which tools/list leaves out, and which
// search_tools finds for code with their schemas), runs a script that
// calls a tool of each and combines them, and a TypeScript one; a codemode
// tool called straight is refused; a wrong argument is refused before the
// call, naming the field; progress arrives per inner call; cancelling the
// outer call cancels the inner one (the audit log names it, via
// code/run); hostile scripts each end with an error naming their limit
// while bob's calls go on and the host's RSS stays within the cap; bob's
// script cannot reach alice's opt-in server; a user who turns code mode
// off loses code__run.
func TestCodeModeEndToEnd(t *testing.T) {
	everything := everythingBin(t)
	b := build(t)
	codemodeBin := testbin.Build(t, pkg+"ext-codemode/cmd/agenthost-ext-codemode")
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{
			"notes":      map[string]any{"command": b.notes, "tools": map[string]any{"add_note": "codemode", "list_notes": "codemode", "slow": "codemode"}},
			"everything": map[string]any{"command": everything, "args": []string{"stdio"}, "tools": map[string]any{"*": "codemode"}},
			"private":    map[string]any{"command": b.notes, "availability": "opt-in", "tools": map[string]any{"*": "codemode"}},
		},
	}, map[string]any{"extensions": map[string]any{"code": map[string]any{"path": codemodeBin, "config": map[string]any{
		"openServers": []string{"notes", "private"}, "cpuSeconds": 2, "memoryMiB": 32, "maxCalls": 8, "wallClockSeconds": 30,
	}}}})
	e.startServe()
	token := func(user string) string {
		return strings.TrimSpace(e.must("", "token", "create", "--user", user, "--name", "e2e"))
	}
	e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "servers", `{"private":true}`)
	var progress atomic.Int32
	progressed := make(chan string, 64)
	alice, err := connectWith(t, e.url, token("alice"), &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress.Add(1)
			select {
			case progressed <- r.Params.Message:
			default:
			}
		},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := connect(t, e.url, token("bob"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// code__run is listed with the declarations; codemode tools are not.
	var run *mcp.Tool
	for tool, err := range alice.cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == "code__run" {
			run = tool
		}
		if strings.HasPrefix(tool.Name, "everything__") || tool.Name == "notes__add_note" {
			t.Errorf("codemode tool %s is listed", tool.Name)
		}
	}
	if run == nil {
		t.Fatal("alice has no code__run")
	}
	for _, want := range []string{"declare const tools", "add_note(args: { text: string; })", "everything: {", "echo(args: { message: string; })",
		"get_sum(args: { a: number; b: number; })", "list_notes(args: object): Promise<{ notes: null | string[]; }>", "private: {"} {
		if !strings.Contains(run.Description, want) {
			t.Errorf("code__run's description lacks %q:\n%s", want, run.Description)
		}
	}
	if strings.Contains(run.Description, "toggle_simulated_logging(") {
		t.Errorf("a tool that may change things (everything's toggle-simulated-logging, not read-only, server not opened) is declared:\n%s", run.Description)
	}

	// search_tools, the deferred tools' discovery, finds codemode tools for
	// code (what the description points to past its budget).
	sr, err := alice.call(t, "search_tools", map[string]any{"query": "sum"})
	if err != nil {
		t.Fatalf("search_tools: %v", err)
	}
	if sr.IsError || !strings.Contains(text(sr), `tools.call("everything/get-sum", args)`) || !strings.Contains(text(sr), `"a"`) {
		t.Errorf("search_tools for a codemode tool: %q", text(sr))
	}

	// Two tools of two servers, combined.
	res, o, err := runCode(t, ctx, alice, `const a = await tools.notes.add_note({text: "from code"});
const s = await tools.everything.get_sum({a: 2, b: 3});
const e = await tools.call("everything/echo", {message: "hi"});
console.log("count", a.count);
return {count: a.count, sum: s, echo: e};`, nil)
	if err != nil || res.IsError || o.Error != nil {
		t.Fatalf("the script failed: %v %+v %s", err, o.Error, text(res))
	}
	var v struct {
		Count int    `json:"count"`
		Sum   string `json:"sum"`
		Echo  string `json:"echo"`
	}
	if json.Unmarshal(o.Value, &v) != nil || v.Count != 1 || !strings.Contains(v.Sum, "5") || !strings.Contains(v.Echo, "hi") || len(o.Calls) != 3 || o.Logs[0] != "count 1" {
		t.Errorf("outcome %s %+v", o.Value, o)
	}
	// The codemode tool straight on /mcp: refused.
	if r, err := alice.call(t, "notes__add_note", map[string]any{"text": "x"}); err == nil && !r.IsError {
		t.Errorf("notes__add_note called straight: %s, want a refusal", text(r))
	}
	// A wrong argument: refused before the call, naming the field.
	_, o, err = runCode(t, ctx, alice, `await tools.notes.add_note({txt: "x"});`, nil)
	if err != nil || o.Error == nil || !strings.Contains(o.Error.Message, "text") || len(o.Calls) != 1 || o.Calls[0].Outcome != "refused" {
		t.Errorf("a wrong argument: %v %+v", err, o)
	}
	_, o, _ = runCode(t, ctx, alice, `return (await tools.notes.list_notes({})).notes.length;`, nil)
	if string(o.Value) != "1" {
		t.Errorf("notes after the refused call: %s, want 1 (the call not made)", o.Value)
	}
	// TypeScript.
	_, o, err = runCode(t, ctx, alice, "interface Sum { n: number }\nconst r: Sum = { n: 0 };\nconst s: string = await tools.everything.get_sum({a: 1, b: 1}) as string;\nreturn s.length > 0 ? r.n + 1 : -1;", nil)
	if err != nil || o.Error != nil || string(o.Value) != "1" {
		t.Errorf("TypeScript: %v %+v %s", err, o.Error, o.Value)
	}
	// An image of an inner result is passed on.
	res, o, _ = runCode(t, ctx, alice, `await tools.everything.get_tiny_image({}); return "ok";`, nil)
	if o.Error != nil || !slices.ContainsFunc(res.Content, func(c mcp.Content) bool { _, ok := c.(*mcp.ImageContent); return ok }) {
		t.Errorf("the inner image is not in the result: %+v", o.Error)
	}
	// Progress: one notification per inner call at least.
	before := progress.Load()
	if _, o, err = runCode(t, ctx, alice, `await tools.everything.echo({message: "1"}); await tools.everything.echo({message: "2"}); return 2`, mcp.Meta{"progressToken": "p-1"}); err != nil || o.Error != nil {
		t.Fatalf("progress script: %v %+v", err, o.Error)
	}
	for progress.Load()-before < 2 {
		select {
		case <-progressed:
		case <-time.After(20 * time.Second):
			t.Fatalf("%d progress notifications, want 2", progress.Load()-before)
		}
	}

	// Cancel: the outer call's cancellation reaches the inner one.
	cctx, cancel := context.WithCancel(ctx)
	for len(progressed) > 0 {
		<-progressed
	}
	go func() {
		defer cancel()
		select {
		case <-progressed: // add_note ended: slow starts now
			time.Sleep(200 * time.Millisecond)
		case <-time.After(20 * time.Second):
		}
	}()
	if _, _, err := runCode(t, cctx, alice, `await tools.notes.add_note({text: "before slow"}); await tools.notes.slow({duration: "10m"}); return 1`, mcp.Meta{"progressToken": "p-2"}); err == nil {
		t.Error("the cancelled call returned no error")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var slow []auditLine
		for _, r := range e.auditLines("--user", "alice") {
			if r.Tool == "notes/slow" {
				slow = append(slow, r)
			}
		}
		if len(slow) > 0 {
			if slow[0].Outcome == "ok" || !strings.Contains(slow[0].Credential, "via code/run") {
				t.Errorf("the cancelled inner call's record: %+v", slow[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no audit record of the cancelled inner call notes/slow (was it cancelled?)")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Hostile scripts, while bob calls a tool; the host's RSS bounded.
	// bob calls from before the base is read: his first few thousand
	// calls grow the host's heap to its working size (GOGC 400: 20–30
	// MiB), whatever the scripts do, and the endless loop lasts as long
	// as bob's calls leave it CPU (it is charged its thread's CPU time).
	stop := make(chan struct{})
	var bobWG sync.WaitGroup
	var bobCalls, bobFails atomic.Int32
	bobWG.Add(1)
	go func() {
		defer bobWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := bob.cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__echo", Arguments: map[string]any{"text": "bob"}})
			bobCalls.Add(1)
			if err != nil || r.IsError || text(r) != "bob" {
				bobFails.Add(1)
			}
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); bobCalls.Load() < 5000 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	rss0 := vmRSS(t, e.serve.Process.Pid)
	warmup := bobCalls.Load()
	for _, h := range []struct{ name, code, want, limit string }{
		{"endless loop", "for (;;) {}", "computed longer", "cpuSeconds"},
		{"repeat 2**30", "return 'x'.repeat(2**30).length", "invalid string length", "memoryMiB"},
		{"array without end", "const a = []; for (;;) a.push('x'.repeat(10000) + a.length);", "out of memory", "memoryMiB"},
		{"deep recursion", "const f = (n) => f(n + 1) + 1; return f(0);", "recursed too deep", "stack"},
		{"flood of inner calls", "await Promise.all(Array.from({length: 1000}, () => tools.everything.echo({message: 'x'})));", "more than 8 tool calls", "maxCalls"},
		{"awaits forever", "await new Promise(() => {});", "nothing can settle", ""},
		{"network", "return await fetch('http://127.0.0.1/')", "'fetch' is not defined", ""},
		{"files", "return require('fs').readFileSync('/etc/passwd')", "'require' is not defined", ""},
	} {
		_, o, err := runCode(t, ctx, alice, h.code, nil)
		if err != nil || o.Error == nil || !strings.Contains(o.Error.Message, h.want) || o.Error.Limit != h.limit {
			t.Errorf("%s: %v %+v, want %q (limit %q)", h.name, err, o.Error, h.want, h.limit)
		}
	}
	close(stop)
	bobWG.Wait()
	if bobCalls.Load() == 0 || bobFails.Load() > 0 {
		t.Errorf("bob's calls during the hostile scripts: %d, %d failed", bobCalls.Load(), bobFails.Load())
	}
	if grew := vmRSS(t, e.serve.Process.Pid) - rss0; grew > 32<<10 {
		t.Errorf("the host's RSS grew by %d KiB, more than the 32 MiB cap", grew)
	}
	t.Logf("bob made %d calls during the hostile scripts (%d before); host RSS %d KiB before", bobCalls.Load()-warmup, warmup, rss0)

	// bob's script cannot reach alice's opt-in server.
	_, o, err = runCode(t, ctx, bob, `return await tools.call("private/list_notes", {})`, nil)
	if err != nil || o.Error == nil || !strings.Contains(o.Error.Message, "not one code may call") {
		t.Errorf("bob calling alice's private/list_notes: %v %+v", err, o.Error)
	}
	if _, o, _ = runCode(t, ctx, bob, `return Object.keys(tools)`, nil); strings.Contains(string(o.Value), "private") {
		t.Errorf("bob's tools hold alice's private server: %s", o.Value)
	}

	// alice turns code mode off: code__run goes.
	e.must("", "settings", "set", "--user", "alice", "--ext", "code", "codemode", `{"enabled":false}`)
	deadline = time.Now().Add(20 * time.Second)
	for slices.Contains(alice.names(t), "code__run") {
		if time.Now().After(deadline) {
			t.Fatal("code__run still listed after alice turned code mode off")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCodeModeSwitchInABrowser (issue 22): alice turns code mode off on
// her settings page in headless Chromium (the section's switch, saved):
// her open /mcp session loses code__run; turned on again, it is back.
func TestCodeModeSwitchInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	codemodeBin := testbin.Build(t, pkg+"ext-codemode/cmd/agenthost-ext-codemode")
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes": map[string]any{"command": b.notes, "tools": map[string]any{"list_notes": "codemode"}},
	}}, map[string]any{"extensions": map[string]any{"code": map[string]any{"path": codemodeBin, "config": map[string]any{"openServers": []string{"notes"}}}}})
	e.startServe()
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "agent"))
	alice, err := connect(t, e.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	listed := func(want bool) {
		t.Helper()
		eventually(t, fmt.Sprintf("code__run listed: %v", want), func() bool { return slices.Contains(alice.names(t), "code__run") == want })
	}
	listed(true)

	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))
	ctx := newBrowser(t)
	do, _ := browserSteps(ctx, t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	const form = `#s-code-codemode-form`
	const sw = form + ` input[type=checkbox][name="enabled"]`
	do("sign in and find the code mode switch",
		chromedp.Navigate(link),
		chromedp.WaitVisible(css(`#continue`)),
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(form)),
	)
	for _, on := range []bool{false, true} {
		checked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('`+sw+`').checked`))
		if err != nil {
			t.Fatal(err)
		}
		if checked != on {
			do("flip the switch", chromedp.Click(css(sw)))
		}
		do(fmt.Sprintf("save code mode %v", on),
			chromedp.SetAttributeValue(css(form), "data-test", "saving"),
			chromedp.Click(css(form+` button[type="submit"]`)),
			chromedp.WaitNotPresent(css(form+`[data-test="saving"]`)),
			chromedp.WaitVisible(css(form)),
		)
		listed(on)
		if got := strings.TrimSpace(e.must("", "settings", "get", "--user", "alice", "--ext", "code", "codemode")); !strings.Contains(got, fmt.Sprintf(`"enabled":%v`, on)) && !strings.Contains(got, fmt.Sprintf(`"enabled": %v`, on)) {
			t.Errorf("alice's stored code mode settings after the page's save: %s", got)
		}
	}
}
