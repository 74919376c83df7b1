package ext_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// actorHost is a fake host that acts as users: it records what reached it.
type actorHost struct {
	*exttest.FakeHost
	mint *ext.MintTokenRequest
	call *ext.CallAsRequest
	list *ext.Scope
	rev  string
}

func (h *actorHost) MintUserToken(_ context.Context, req *ext.MintTokenRequest) (*ext.MintedToken, error) {
	h.mint = req
	return &ext.MintedToken{Token: "ah_secret", ID: "tok_1"}, nil
}

func (h *actorHost) RevokeUserToken(_ context.Context, id string) error {
	h.rev = id
	if id == "tok_other" {
		return ext.Errorf(ext.ErrNotFound, "token %q", id)
	}
	return nil
}

func (h *actorHost) ListToolsAs(_ context.Context, user string, scope *ext.Scope) ([]ext.Tool, error) {
	h.list = scope
	return []ext.Tool{{Name: "notes/list", Exposure: ext.ExposureCodemode}}, nil
}

func (h *actorHost) CallToolAs(_ context.Context, req *ext.CallAsRequest) (*ext.CallToolResult, error) {
	h.call = req
	if req.Name == "files/read" {
		return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
	}
	return ext.TextResult("called " + req.Name), nil
}

// TestUserActorCrosses: on every carrier, the caller's scope reaches the
// extension in CallToolRequest.Scope (nil stays nil), and each UserActor
// method the extension calls reaches the host with every field (the
// sentinels survive); a host that cannot act as users answers
// ErrUnimplemented over the wire.
func TestUserActorCrosses(t *testing.T) {
	scope := &ext.Scope{Servers: []string{"notes"}, Tools: []string{"notes/list_*"}}
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			impl := newTestExt()
			var e ext.Extension = impl
			if carrier != "inprocess" {
				e = exttest.Connect(t, impl, &exttest.ConnectOptions{CallChannel: carrier == "grpc-socket"})
			}
			h := &actorHost{FakeHost: exttest.NewFakeHost(t)}
			ctx := context.Background()
			if err := e.Configure(ctx, &ext.ConfigureRequest{Name: "test", Config: json.RawMessage(`{}`), Host: h}); err != nil {
				t.Fatal(err)
			}
			tc := e.(ext.ToolCaller)
			for _, sc := range []*ext.Scope{scope, nil} {
				res, err := tc.CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/scope", Scope: sc})
				want, _ := json.Marshal(sc)
				if err != nil || res.Text() != string(want) {
					t.Errorf("the scope %s arrived as %v, %v", want, res, err)
				}
			}
			ua, ok := hostOf(impl).(ext.UserActor)
			if !ok {
				t.Fatal("the extension's host is no UserActor")
			}
			exp := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
			tok, err := ua.MintUserToken(ctx, &ext.MintTokenRequest{User: "alice", Name: "agent", Scope: scope, Expires: exp})
			if err != nil || tok.Token != "ah_secret" || tok.ID != "tok_1" {
				t.Errorf("MintUserToken = %+v, %v", tok, err)
			}
			if m := h.mint; m == nil || m.User != "alice" || m.Name != "agent" || !reflect.DeepEqual(m.Scope, scope) || !m.Expires.Equal(exp) {
				t.Errorf("the host got the mint %+v", h.mint)
			}
			if err := ua.RevokeUserToken(ctx, "tok_other"); !errors.Is(err, ext.ErrNotFound) || h.rev != "tok_other" {
				t.Errorf("RevokeUserToken: %v (host got %q)", err, h.rev)
			}
			tools, err := ua.ListToolsAs(ctx, "alice", scope)
			if err != nil || len(tools) != 1 || tools[0].Exposure != ext.ExposureCodemode || !reflect.DeepEqual(h.list, scope) {
				t.Errorf("ListToolsAs = %+v, %v (host got %v)", tools, err, h.list)
			}
			res, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Scope: scope, Name: "notes/list", Arguments: json.RawMessage(`{"a":1}`), Conversation: "mcp:1"})
			if err != nil || res.Text() != "called notes/list" {
				t.Errorf("CallToolAs = %v, %v", res, err)
			}
			if c := h.call; c == nil || c.User != "alice" || !reflect.DeepEqual(c.Scope, scope) || string(c.Arguments) != `{"a":1}` || c.Conversation != "mcp:1" {
				t.Errorf("the host got the call %+v", h.call)
			}
			if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Scope: scope, Name: "files/read"}); !errors.Is(err, ext.ErrNotFound) {
				t.Errorf("a call outside the scope: %v, want ErrNotFound", err)
			}
		})
	}
	// A host without the capability: Unimplemented across the wire.
	impl := newTestExt()
	e := exttest.Connect(t, impl, nil)
	if err := e.Configure(context.Background(), &ext.ConfigureRequest{Name: "test", Config: json.RawMessage(`{}`), Host: exttest.NewFakeHost(t)}); err != nil {
		t.Fatal(err)
	}
	if _, err := hostOf(impl).(ext.UserActor).ListToolsAs(context.Background(), "alice", nil); !errors.Is(err, ext.ErrUnimplemented) {
		t.Errorf("a host that cannot act as users: %v, want ErrUnimplemented", err)
	}
}
