package extmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/ext/exttest"
)

// TestSignInEntry checks what an agent learns of a server that waits for
// its user's first sign-in: before any grant, the user's catalog holds
// the tool o/sign_in and an instruction naming o with its link (a shared
// server waiting for the operator offers neither); calling it fails with
// the URL elicitation required error carrying the link for a client that
// declared URL elicitation, and with the error result carrying the link
// for one that did not; once the user signed in the entry is gone and
// the real tools are there (another user keeps theirs: nothing of one
// user reaches another); when the grant is lost the entry comes back.
func TestSignInEntry(t *testing.T) {
	as := startOAuth(t)
	f := newFixtureAt(t, "grpc", fmt.Sprintf(`{"mcpServers": {"o": {"url": %q},
		"team": {"url": %q, "credentials": "shared", "users": ["alice", "bob"]}}}`, as.mcpURL(), as.mcpURL()), publicURL, nil)
	link := publicURL + "/settings/connect/mcp/o"
	for _, u := range []string{"alice", "bob"} {
		f.setToggles(u, `{"team": true}`)
		f.activate(u)
	}
	entry := "o/" + extmcp.SignInTool
	for _, u := range []string{"alice", "bob"} {
		names := f.waitTools(u, func(n []string) bool { return slices.Contains(n, entry) })
		if hasPrefix(names, "team/") {
			t.Errorf("%s's tools %q offer the shared server, which only the operator signs in to", u, names)
		}
		cat := f.h.UserCatalog(u)
		var tool ext.Tool
		for _, x := range cat.Tools {
			if x.Name == entry {
				tool = x
			}
		}
		if !strings.Contains(tool.Description, "Sign in to MCP server \"o\"") || !json.Valid(tool.InputSchema) {
			t.Errorf("the entry %+v", tool)
		}
		ins := instructionsText(cat)
		if !strings.Contains(ins, `"o" (`+link+`)`) || strings.Contains(ins, `"team"`) || !strings.Contains(ins, extmcp.SignInTool) {
			t.Errorf("%s's instructions %q; want o and its link, not team", u, ins)
		}
	}

	tc := f.e.(ext.ToolCaller)
	call := func(user, name string, s *exttest.Session) (*ext.CallToolResult, error) {
		res, err := tc.CallTool(ctx(t), &ext.CallToolRequest{User: user, Name: name, Arguments: json.RawMessage(`{}`), Session: s})
		if err != nil {
			return nil, err
		}
		return res.Fields()
	}
	urlSess := &exttest.Session{Caps: json.RawMessage(`{"elicitation":{"url":{}}}`),
		Answer: func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}}
	_, err := call("alice", entry, urlSess)
	var re *ext.RPCError
	if !errors.As(err, &re) || re.Code != ext.CodeURLElicitationRequired || !strings.Contains(string(re.Data), link) ||
		!strings.Contains(string(re.Data), `"elicitationId"`) {
		t.Fatalf("alice's call of %s with URL elicitation: %v; want -32042 with the link", entry, err)
	}
	res, err := call("bob", entry, &exttest.Session{})
	if err != nil || !res.IsError || !strings.Contains(res.Text(), link) || !strings.Contains(res.Text(), "sign") {
		t.Errorf("bob's call of %s without URL elicitation: %v %+v; want the error result with the link", entry, err, res)
	}

	login := canary("alice")
	f.signIn("alice", "o", login)
	names := f.waitTools("alice", func(n []string) bool { return slices.Contains(n, "o/whoami") })
	if slices.Contains(names, entry) {
		t.Errorf("alice's tools after signing in %q still offer %s", names, entry)
	}
	if ins := instructionsText(f.h.UserCatalog("alice")); strings.Contains(ins, "wait for the user to sign in") {
		t.Errorf("alice's instructions after signing in %q still name a waiting server", ins)
	}
	if names := f.names("bob"); !slices.Contains(names, entry) || slices.Contains(names, "o/whoami") {
		t.Errorf("bob's tools %q after alice signed in; want his entry still, no tools of hers", names)
	}
	if f.whoami("alice") != login {
		t.Errorf("alice's call does not carry her sign-in")
	}

	// The grant is lost: the call that finds out parks the server, and
	// the entry is offered again.
	as.revoke(login)
	_, _ = call("alice", "o/whoami", &exttest.Session{})
	names = f.waitTools("alice", func(n []string) bool { return slices.Contains(n, entry) })
	if slices.Contains(names, "o/whoami") {
		t.Errorf("alice's tools after losing the grant %q", names)
	}
}

// instructionsText joins a catalog's instructions.
func instructionsText(c ext.Catalog) string {
	var b strings.Builder
	for _, in := range c.Instructions {
		b.WriteString("[" + in.Source + "] " + in.Text + "\n")
	}
	return b.String()
}
