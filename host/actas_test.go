package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// fakeMinter records the tokens a host asks it to mint.
type fakeMinter struct {
	ext, user string
	scope     *ext.Scope
}

func (m *fakeMinter) MintToken(_ context.Context, extName, user, _ string, scope *ext.Scope, _ time.Time) (string, string, error) {
	m.ext, m.user, m.scope = extName, user, scope
	return "ah_x", "tok_1", nil
}

func (m *fakeMinter) RevokeMinted(context.Context, string, string) (string, string, error) {
	return "", "", nil
}

// TestUserActorInProcess: an in-process extension granted ActAsUsers lists
// and calls a user's tools within a scope (outside it: ErrNotFound; the
// caller's scope slices are not touched), mints only scoped tokens that
// expire within a day (through the host's TokenMinter, named as the
// minter); without the grant every method is ErrPermission.
func TestUserActorInProcess(t *testing.T) {
	ctx := context.Background()
	newHost := func(grant bool) (*host.Host, ext.UserActor) {
		te := &testExt{}
		h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
			&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: te, ActAsUsers: grant}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		te.mu.Lock()
		defer te.mu.Unlock()
		return h, te.host.(ext.UserActor)
	}
	h, ua := newHost(true)
	scope := &ext.Scope{Servers: []string{"t"}, Tools: []string{"t/echo", "t/greet"}}
	tools, err := ua.ListToolsAs(ctx, "alice", scope)
	if err != nil || len(tools) != 2 || tools[0].Name != "t/echo" || tools[1].Name != "t/greet" {
		t.Errorf("ListToolsAs = %+v, %v", tools, err)
	}
	if scope.Tools[0] != "t/echo" || scope.Tools[1] != "t/greet" {
		t.Error("the caller's scope was changed")
	}
	if res, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Scope: scope, Name: "t/echo", Arguments: []byte(`{"a":1}`)}); err != nil || res.IsError {
		t.Errorf("CallToolAs t/echo: %v %v", res, err)
	}
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Scope: scope, Name: "t/env"}); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("CallToolAs outside the scope: %v, want ErrNotFound", err)
	}
	exp := time.Now().Add(time.Hour)
	if _, err := ua.MintUserToken(ctx, &ext.MintTokenRequest{User: "alice", Name: "a", Scope: scope, Expires: exp}); !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("minting without a token store: %v, want ErrUnavailable", err)
	}
	m := &fakeMinter{}
	h.SetTokenMinter(m)
	if tok, err := ua.MintUserToken(ctx, &ext.MintTokenRequest{User: "alice", Name: "a", Scope: scope, Expires: exp}); err != nil || tok.ID != "tok_1" || m.ext != "t" || m.user != "alice" {
		t.Errorf("MintUserToken = %+v, %v (minter got %+v)", tok, err, m)
	}
	for name, req := range map[string]*ext.MintTokenRequest{
		"no scope":     {User: "alice", Name: "a", Expires: exp},
		"no expiry":    {User: "alice", Name: "a", Scope: scope},
		"past expiry":  {User: "alice", Name: "a", Scope: scope, Expires: time.Now().Add(-time.Minute)},
		"too long":     {User: "alice", Name: "a", Scope: scope, Expires: time.Now().Add(host.MaxMintedTTL + time.Hour)},
		"invalid user": {User: "", Name: "a", Scope: scope, Expires: exp},
	} {
		if _, err := ua.MintUserToken(ctx, req); !errors.Is(err, ext.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}

	_, denied := newHost(false)
	if _, err := denied.ListToolsAs(ctx, "alice", nil); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("ListToolsAs without the grant: %v", err)
	}
	if _, err := denied.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "t/echo"}); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("CallToolAs without the grant: %v", err)
	}
	if _, err := denied.MintUserToken(ctx, &ext.MintTokenRequest{User: "alice", Name: "a", Scope: scope, Expires: exp}); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("MintUserToken without the grant: %v", err)
	}
	if err := denied.RevokeUserToken(ctx, "tok_1"); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("RevokeUserToken without the grant: %v", err)
	}
}
