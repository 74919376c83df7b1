package mcpendpoint_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agenthost/agenthost/host/internal/api"
)

// TestUnknownToolNamesServerTools: a call of a tool the user lacks, whose
// name starts with the prefix of a server the user has tools of, is still
// -32602 but names that server's listed tools with their titles — so an
// agent that calls o__whoami while o waits for a sign-in learns of
// o__sign_in ("Sign in to o") — on sessions and on stateless requests,
// for the longest matching server, at most five names, and never from
// another user's tools.
func TestUnknownToolNamesServerTools(t *testing.T) {
	e := newEnv(t, nil)
	entry := tool("o/sign_in", "Sign in to MCP server \"o\".", "")
	entry.Title = "Sign in to o"
	many := tool("big/t0", "", "")
	alice := []api.Tool{entry, tool("o__x/y", "", ""), many}
	for i := 1; i < 8; i++ {
		alice = append(alice, tool(fmt.Sprintf("big/t%d", i), "", ""))
	}
	e.host.SetTools("alice", alice...)
	for _, version := range []string{"2025-11-25", ""} {
		c, err := e.connect(t, aliceTok, version)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.connect(t, bobTok, version)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			c          *client
			name, want string
		}{
			{c, "o__whoami", `unknown tool "o__whoami"; the tools of "o" are: o__sign_in ("Sign in to o")`},
			{c, "o__x__z", `unknown tool "o__x__z"; the tools of "o__x" are: o__x__y`},
			{c, "big__t9", `unknown tool "big__t9"; the tools of "big" are: big__t0, big__t1, big__t2, big__t3, big__t4 and 3 more`},
			{c, "nope", `unknown tool "nope"`},
			{b, "o__whoami", `unknown tool "o__whoami"`},
		} {
			_, err := tc.c.tryCall(tc.name, `{}`)
			var re *jsonrpc.Error
			if !errors.As(err, &re) || re.Code != jsonrpc.CodeInvalidParams || re.Message != tc.want {
				t.Errorf("version %q: calling %s: %v; want -32602 %q", version, tc.name, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "sign_in") && tc.c == b {
				t.Errorf("bob's error names alice's tool: %v", err)
			}
		}
	}
	if n := len(e.host.Calls()); n != 0 {
		t.Errorf("the host ran %d calls", n)
	}
}
