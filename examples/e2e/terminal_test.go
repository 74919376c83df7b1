package e2e_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTerminalEscapes runs the real CLI against a host whose servers
// attack the operator's terminal (examples/servers/notes -hostile): a tool
// named with a screen-clearing, title-setting escape sequence, a
// description and a tool error that write the clipboard (OSC 52), ring the
// bell and forge a line with \r\n, and a server whose tools/list fails
// with those words. `agenthost tools`, `status` and `call` must print
// none of it raw, the hostile tool name must be refused (the server's
// other tools stay) with the status naming it, escaped, and the JSON
// output must stay valid.
func TestTerminalEscapes(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"evil":   map[string]any{"command": b.notes, "args": []string{"-hostile=tools"}},
		"broken": map[string]any{"command": b.notes, "args": []string{"-hostile=list"}},
	}})
	e.startServe()

	raw := func(what, out string) {
		t.Helper()
		if i := strings.IndexAny(out, "\x1b\a\r\u009b"); i >= 0 {
			t.Errorf("%s printed a raw control character %q: %q", what, out[i], out)
		}
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "agenthost: all is well") {
				t.Errorf("%s printed a line a server forged: %q", what, out)
			}
		}
	}

	out, errOut, code := e.run("", "tools", "--user", "alice")
	if code != 0 {
		t.Fatalf("agenthost tools: exit %d\n%s\n%s", code, out, errOut)
	}
	raw("agenthost tools", out+errOut)
	if !strings.Contains(out, `evil/forge`) || !strings.Contains(out, `Innocent.\u001b]52;c;cHduZWQ=\u0007\u000d`) {
		t.Errorf("agenthost tools does not show evil/forge with its description escaped:\n%s", out)
	}
	// The hostile tool is named "t" + escapes and described "Clears your
	// screen." (the notes server also has a tool named "trace").
	if strings.Contains(out, "Clears your screen") || strings.Contains(out, "pwned") || !strings.Contains(out, "evil/add_note") {
		t.Errorf("agenthost tools: the hostile name should be refused and the server's other tools kept:\n%s", out)
	}

	jsonOut := e.must("", "tools", "--user", "alice", "--json")
	raw("agenthost tools --json", jsonOut)
	var tools []struct{ Name, Description string }
	if err := json.Unmarshal([]byte(jsonOut), &tools); err != nil {
		t.Fatalf("agenthost tools --json is not JSON: %v\n%s", err, jsonOut)
	}
	for _, tl := range tools {
		if tl.Name == "evil/forge" && !strings.HasPrefix(tl.Description, "Innocent.\x1b]52") {
			t.Errorf("the JSON description lost its text: %q", tl.Description)
		}
	}

	st := e.must("", "status", "--user", "alice")
	raw("agenthost status", st)
	for _, want := range []string{
		`refused 1 tool(s) whose name has control characters: "t\u001b[2J\u001b]0;pwned\u0007"`,
		`no tools\u001b]52;c;cHduZWQ=\u0007\u000d\u000aagenthost: all is well`,
	} {
		if !strings.Contains(st, want) {
			t.Errorf("agenthost status lacks %s:\n%s", want, st)
		}
	}
	stJSON := e.must("", "status", "--user", "alice", "--json")
	raw("agenthost status --json", stJSON)
	if !json.Valid([]byte(stJSON)) {
		t.Errorf("agenthost status --json is not JSON:\n%s", stJSON)
	}

	out, errOut, code = e.run("", "call", "--user", "alice", "evil/forge", "{}")
	if code != 1 || !strings.Contains(errOut, `failed\u001b]52;c;cHduZWQ=\u0007\u000d\u000aagenthost: all is well`) {
		t.Errorf("agenthost call evil/forge: exit %d, want 1 with the error escaped\n%s\n%s", code, out, errOut)
	}
	raw("agenthost call", out+errOut)
}
