package e2e_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// auditLine is a record as `agenthost audit --json` prints it.
type auditLine struct {
	ID         int64  `json:"id"`
	Kind       string `json:"kind"`
	User       string `json:"user"`
	Credential string `json:"credential"`
	Session    string `json:"session"`
	Server     string `json:"server"`
	Tool       string `json:"tool"`
	ToolHash   string `json:"toolHash"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
	ReqBytes   int64  `json:"requestBytes"`
	ResBytes   int64  `json:"resultBytes"`
	Arguments  string `json:"arguments"`
}

func (e *env) auditLines(args ...string) []auditLine {
	e.t.Helper()
	out := e.must("", append([]string{"audit", "--json"}, args...)...)
	var recs []auditLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r auditLine
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			e.t.Fatalf("audit --json printed a line that is not JSON: %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// toolHashOf computes, from `agenthost tools --json`, the hash of a tool's
// definition as the audit log keeps it: SHA-256 of its name, title,
// description, schemas and annotations as JSON.
func (e *env) toolHashOf(user, name string) string {
	e.t.Helper()
	var tools []struct {
		Name         string          `json:"name"`
		Title        string          `json:"title,omitempty"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
		OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
		Annotations  json.RawMessage `json:"annotations,omitempty"`
	}
	if err := json.Unmarshal([]byte(e.must("", "tools", "--user", user, "--json")), &tools); err != nil {
		e.t.Fatal(err)
	}
	for _, tl := range tools {
		if tl.Name == name {
			b, _ := json.Marshal(tl)
			sum := sha256.Sum256(b)
			return hex.EncodeToString(sum[:])
		}
	}
	e.t.Fatalf("%s has no tool %s", user, name)
	return ""
}

// TestAuditLog (issue 21): a call through /mcp (go-sdk client) appears in
// `agenthost audit --json` with the user, the token that made it, the
// server, the tool, the hash of the tool's definition and the outcome; a
// call the host refuses appears with why; the filters select; bob's JSON
// API and settings page show his records and none of alice's, the
// operator API shows both; arguments are not kept (bodies off); tokens
// issued and sign-ins are recorded by ID, never a token; --follow shows
// a call made after it started; status shows the counters; a tiny
// retention set in the config deletes the past records.
func TestAuditLog(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}})
	e.startServe()
	alice := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "agent"))
	bob := strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "agent"))
	op := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	var aliceTokID string
	{
		var toks []struct{ ID, User string }
		_ = json.Unmarshal([]byte(e.must("", "token", "list", "--user", "alice", "--json")), &toks)
		if len(toks) == 1 {
			aliceTokID = toks[0].ID
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, who := range []struct{ tok, text string }{{alice, "canary-alice-args"}, {bob, "from bob"}} {
		c, err := connect(t, e.url, who.tok)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__echo", Arguments: map[string]any{"text": who.text}})
		if err != nil || res.IsError {
			t.Fatalf("echo: %v %+v", err, res)
		}
		_ = c.cs.Close()
	}
	// A call the host refuses: a tool alice does not have.
	if _, _, code := e.run("", "call", "--user", "alice", "notes/nope", "{}"); code == 0 {
		t.Fatal("calling an unknown tool succeeded")
	}

	recs := e.auditLines()
	var ok, refused *auditLine
	for i, r := range recs {
		switch {
		case r.User == "alice" && r.Tool == "notes/echo":
			ok = &recs[i]
		case r.User == "alice" && r.Tool == "notes/nope":
			refused = &recs[i]
		}
	}
	if ok == nil || refused == nil {
		t.Fatalf("audit --json lacks alice's call or her refused one:\n%+v", recs)
	}
	want := e.toolHashOf("alice", "notes/echo")
	if ok.Kind != "tool" || ok.Server != "notes" || ok.Outcome != "ok" || ok.ToolHash != want ||
		ok.ReqBytes == 0 || ok.ResBytes == 0 || (aliceTokID != "" && ok.Credential != "token:"+aliceTokID) {
		t.Errorf("alice's call = %+v, want server notes, outcome ok, hash %s, credential token:%s", *ok, want, aliceTokID)
	}
	if ok.Arguments != "" {
		t.Errorf("the arguments were kept without audit.bodies: %q", ok.Arguments)
	}
	if refused.Outcome != "refused" || !strings.Contains(refused.Reason, "not found") || refused.Credential != "cli" {
		t.Errorf("the refused call = %+v, want refused with why, by the CLI", *refused)
	}
	raw := dbBytes(e.dir + "/data/audit.db")
	if strings.Contains(string(raw), alice) || strings.Contains(string(raw), "canary-alice-args") {
		t.Error("audit.db holds a token or the call's arguments")
	}

	// Filters.
	for _, c := range []struct {
		args []string
		want func(auditLine) bool
	}{
		{[]string{"--user", "bob"}, func(r auditLine) bool { return r.User == "bob" }},
		{[]string{"--outcome", "refused"}, func(r auditLine) bool { return r.Outcome == "refused" }},
		{[]string{"--tool", "notes/echo", "--since", "1h"}, func(r auditLine) bool { return r.Tool == "notes/echo" }},
		{[]string{"--server", "notes"}, func(r auditLine) bool { return r.Server == "notes" }},
	} {
		got := e.auditLines(c.args...)
		if len(got) == 0 {
			t.Errorf("audit %v: no records", c.args)
		}
		for _, r := range got {
			if !c.want(r) {
				t.Errorf("audit %v printed %+v", c.args, r)
			}
		}
	}

	// bob sees his own records only: the JSON API (even asking for
	// alice's) and the settings page.
	for _, q := range []string{"", "?user=alice"} {
		code, body := e.api("GET", "/api/v1/audit"+q, bob, "")
		var mine []auditLine
		if code != http.StatusOK || json.Unmarshal([]byte(body), &mine) != nil || len(mine) == 0 {
			t.Fatalf("bob's /api/v1/audit%s: %d %s", q, code, body)
		}
		for _, r := range mine {
			if r.User != "bob" {
				t.Errorf("bob's /api/v1/audit%s shows %+v", q, r)
			}
		}
	}
	_, _, page := fetch(t, e.settingsBrowser("bob"), "GET", e.url+"/settings", nil)
	if !strings.Contains(page, "Your recent activity") || !strings.Contains(page, "notes/echo") || strings.Contains(page, "notes/nope") ||
		strings.Contains(page, "token:"+aliceTokID) {
		t.Errorf("bob's settings page: activity missing or alice's shown:\n%s", page)
	}
	// The operator's API shows everyone's; a user's token is refused.
	code, body := e.api("GET", "/api/operator/v1/audit?user=alice", op, "")
	if code != http.StatusOK || !strings.Contains(body, `"notes/nope"`) || strings.Contains(body, `"bob"`) {
		t.Errorf("operator audit of alice: %d %s", code, body)
	}
	if code, _ := e.api("GET", "/api/operator/v1/audit", bob, ""); code != http.StatusForbidden {
		t.Errorf("bob on the operator audit API: %d, want 403", code)
	}

	// Tokens issued and sign-ins are recorded, by ID, never the token.
	var issued, signin bool
	for _, r := range e.auditLines("--kind", "token") {
		issued = issued || (r.User == "alice" && r.Tool == "token issued" && r.Credential == aliceTokID)
	}
	for _, r := range e.auditLines("--kind", "signin", "--user", "bob") {
		signin = signin || r.Tool == "signin"
	}
	if !issued || !signin {
		t.Errorf("token issued recorded: %v; bob's sign-in recorded: %v", issued, signin)
	}
	raw = dbBytes(e.dir + "/data/audit.db")
	if strings.Contains(string(raw), bob) || strings.Contains(string(raw), op) {
		t.Error("audit.db holds a token")
	}

	// The status names the writer's counters, the dropped records among
	// them.
	if st := e.must("", "status"); !strings.Contains(st, "audit log: ") || !strings.Contains(st, " 0 dropped") {
		t.Errorf("status lacks the audit log's counters:\n%s", st)
	}

	// --follow prints the records that come after it started.
	// (The table's header is printed once the first query answered: the
	// call after it is one only --follow can show.)
	follow := exec.Command(e.bin.agenthost, "--config", e.cfg, "audit", "--follow", "--user", "carol")
	fout, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	frd := bufio.NewReader(fout)
	if head, err := frd.ReadString('\n'); err != nil || !strings.HasPrefix(head, "TIME") {
		t.Fatalf("audit --follow: %q %v", head, err)
	}
	e.must("", "call", "--user", "carol", "notes/echo", `{"text":"followed"}`)
	line, err := frd.ReadString('\n')
	if err != nil || !strings.Contains(line, "carol") || !strings.Contains(line, "notes/echo") || !strings.Contains(line, " ok ") {
		t.Errorf("audit --follow printed %q %v", line, err)
	}
	_ = follow.Process.Signal(os.Interrupt)

	// Retention: a host started with a retention shorter than the
	// records' age deletes them at start.
	e.stopServe()
	cfg := map[string]any{}
	rawCfg, _ := os.ReadFile(e.cfg)
	_ = json.Unmarshal(rawCfg, &cfg)
	cfg["audit"] = map[string]any{"retentionDays": 1e-9}
	rawCfg, _ = json.Marshal(cfg)
	if err := os.WriteFile(e.cfg, rawCfg, 0o600); err != nil {
		t.Fatal(err)
	}
	e.startServe()
	if left := e.auditLines(); len(left) != 0 {
		t.Errorf("records past the retention are still there: %+v", left)
	}
}

// dbBytes is a SQLite file with its write-ahead log.
func dbBytes(path string) []byte {
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(path + "-wal")
	return append(a, b...)
}
