package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSignInEntryEndToEnd runs the real agenthost and agenthost-ext-mcp
// binaries against the example OAuth server, from the agent's side,
// before any grant exists: a go-sdk client that declared URL elicitation
// sees o__sign_in in tools/list and the instructions naming o with its
// link, and its call fails with -32042 carrying the link; a client
// without URL elicitation gets an isError result with the link; another
// user's session says nothing of alice. Alice follows the link (the
// settings page's Connect, the provider's sign-in, the host's callback):
// her client hears the elicitation is complete and that the tools
// changed, the entry is gone and the real tools are there; when her grant
// is revoked the entry is offered again.
func TestSignInEntryEndToEnd(t *testing.T) {
	b := build(t)
	as := startProvider(t, b.oauth)
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"o": map[string]any{"url": as.base + "/mcp"}},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	e.startServe()
	host := e.url
	link := host + "/settings/connect/mcp/o"
	for _, u := range []string{"alice", "bob"} {
		if out := e.must("", "status", "--user", u); !strings.Contains(out, "needs sign-in") {
			t.Fatalf("%s's status before signing in:\n%s", u, out)
		}
	}

	aliceTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	completed := make(chan string, 4)
	ec, err := connectWith(t, host, aliceTok, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			completed <- r.Params.ElicitationID
		},
	}, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if names := ec.names(t); !slices.Contains(names, "o__sign_in") || slices.ContainsFunc(names, func(n string) bool { return n != "o__sign_in" && strings.HasPrefix(n, "o__") }) {
		t.Errorf("alice's tools before signing in: %q; want o__sign_in alone of o's", names)
	}
	if ins := ec.cs.InitializeResult().Instructions; !strings.Contains(ins, `"o" (`+link+`)`) || !strings.Contains(ins, "sign_in") {
		t.Errorf("alice's instructions %q; want o named with its link and the sign_in tool", ins)
	}
	_, err = ec.call(t, "o__sign_in", map[string]any{})
	var re *jsonrpc.Error
	var data struct{ Elicitations []*mcp.ElicitParams }
	if !errors.As(err, &re) || re.Code != mcp.CodeURLElicitationRequired || json.Unmarshal(re.Data, &data) != nil ||
		len(data.Elicitations) != 1 || data.Elicitations[0].Mode != "url" || data.Elicitations[0].URL != link ||
		data.Elicitations[0].ElicitationID == "" {
		t.Fatalf("alice's call of o__sign_in with URL elicitation: %v; want -32042 with the link %s", err, link)
	}

	// A tool of o the agent expected is unknown, and the error names
	// the entry.
	_, err = ec.call(t, "o__whoami", map[string]any{})
	if !errors.As(err, &re) || re.Code != jsonrpc.CodeInvalidParams || !strings.Contains(re.Message, `o__sign_in ("Sign in to o")`) {
		t.Errorf("alice's call of o__whoami before signing in: %v; want unknown tool naming o__sign_in", err)
	}

	pc, err := connect(t, host, aliceTok)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pc.call(t, "o__sign_in", map[string]any{})
	if err != nil || !res.IsError || !strings.Contains(text(res), link) || !strings.Contains(text(res), "sign") {
		t.Errorf("alice's call of o__sign_in without URL elicitation: %v %+v; want an isError result with the link", err, res)
	}
	bc, err := connect(t, host, strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	if ins := bc.cs.InitializeResult().Instructions; !strings.Contains(ins, `"o"`) || strings.Contains(ins, "alice") {
		t.Errorf("bob's instructions %q; want o named, nothing of alice", ins)
	}

	// Alice follows the link: signed in to the settings page, its Connect
	// sends her to the provider, which sends her back to the host.
	login := canaryLogin("alice")
	br := e.settingsBrowser("alice")
	_, _, page := fetch(t, br, "GET", link, nil)
	back := as.signInAt(connectAt(t, br, link, page, as.base), login)
	if c, _, p := fetch(t, br, "GET", back, nil); c != http.StatusOK || !strings.Contains(p, "Connected to o.") {
		t.Fatalf("alice's callback: %d\n%s", c, p)
	}
	select {
	case id := <-completed:
		if id != data.Elicitations[0].ElicitationID {
			t.Errorf("the completion names elicitation %q, want %q", id, data.Elicitations[0].ElicitationID)
		}
	case <-time.After(20 * time.Second):
		t.Error("alice's client never heard that the sign-in was done")
	}
	select {
	case <-ec.changed:
	case <-time.After(20 * time.Second):
		t.Error("alice's client never heard that her tools changed")
	}
	eventually(t, "alice's real tools replace the entry", func() bool {
		names := ec.names(t)
		return slices.Contains(names, "o__whoami") && !slices.Contains(names, "o__sign_in")
	})
	if res, err := ec.call(t, "o__whoami", map[string]any{}); err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), login) {
		t.Errorf("alice's call after signing in: %v %+v", err, res)
	}
	if nc, err := connect(t, host, aliceTok); err != nil || strings.Contains(nc.cs.InitializeResult().Instructions, "wait for the user to sign in") {
		t.Errorf("a new session of alice after signing in: %v; its instructions still name a waiting server", err)
	}
	if names := bc.names(t); !slices.Contains(names, "o__sign_in") || slices.Contains(names, "o__whoami") {
		t.Errorf("bob's tools after alice signed in: %q; want his entry, no tools of hers", names)
	}

	// Her grant is revoked at the provider: the call that finds out parks
	// the server, and the entry is offered again.
	resp, err := http.Post(as.base+"/admin/revoke?login="+url.QueryEscape(login), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, _ = pc.call(t, "o__whoami", map[string]any{})
	eventually(t, "the entry is offered again", func() bool {
		names := ec.names(t)
		return slices.Contains(names, "o__sign_in") && !slices.Contains(names, "o__whoami")
	})
}
