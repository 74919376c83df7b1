package mcpendpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/guard"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// The host's lockout limiter is an mcpendpoint.Limiter as it is.
var _ mcpendpoint.Limiter = (*auth.Limiter)(nil)

// storeVerifier adapts the host's token store to mcpendpoint.Verifier: an
// invalid token and an operator token are refused; any other store error
// means "cannot decide" (503, not counted as a failed attempt).
type storeVerifier struct{ st *auth.Store }

func (v storeVerifier) Verify(ctx context.Context, token string) (mcpendpoint.Principal, error) {
	p, err := v.st.Verify(ctx, token)
	switch {
	case errors.Is(err, auth.ErrInvalidToken):
		return mcpendpoint.Principal{}, err
	case err != nil:
		return mcpendpoint.Principal{}, fmt.Errorf("%w: %w", mcpendpoint.ErrUnavailable, err)
	case p.Operator || p.User == "":
		return mcpendpoint.Principal{}, auth.ErrInvalidToken
	}
	return mcpendpoint.Principal{User: p.User, TokenID: p.TokenID}, nil
}

// TestWiringWithAuth wires the endpoint as the host does: the auth store's
// tokens, its limiter, and OnRevoke calling CloseToken. A revoked token is
// refused at once on its open session, and five bad guesses lock the
// address out for guesses (429 with Retry-After) but not for a valid token.
func TestWiringWithAuth(t *testing.T) {
	lim := auth.NewLimiter(&auth.LimiterOptions{MaxFailures: 5, Window: time.Minute})
	st, err := auth.Open(filepath.Join(t.TempDir(), "auth.db"), &auth.Options{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	tok, info, err := st.CreateToken(ctx, "alice", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	opTok, _, err := st.CreateOperatorToken(ctx, "status")
	if err != nil {
		t.Fatal(err)
	}

	e := newEnv(t, nil) // for its host and server plumbing
	ep, err := mcpendpoint.New(e.host, storeVerifier{st}, &mcpendpoint.Options{
		Limiter: lim, AddrKey: (*guard.TrustedProxies)(nil).Key, VerifyCacheTTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	defer st.OnRevoke(ep.CloseToken)()
	e.srv.Config.Handler = ep

	c := e.mustConnect(t, tok)
	if got := c.names(t); len(got) != 2 {
		t.Fatalf("alice lists %v", got)
	}
	if resp := e.rawPost(t, opTok, "", initBody, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an operator token: status %d, want 401", resp.StatusCode)
	}

	if err := st.RevokeToken(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListTools(ctx, nil); err == nil {
		t.Error("the revoked token's open session still works")
	}
	if resp := e.rawPost(t, tok, c.ID(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the revoked token: status %d, want 401", resp.StatusCode)
	}
	waitFor(t, "the revoked session to close", func() bool { return ep.Sessions() == 0 })

	// The operator token failed once already; four more guesses lock out.
	for i := range 4 {
		e.rawPost(t, fmt.Sprintf("%sguess%d", auth.TokenPrefix, i), "", initBody, nil)
	}
	resp := e.rawPost(t, opTok, "", initBody, nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "try again in") || resp.Header.Get("Retry-After") != "60" {
		t.Errorf("after 5 failures: status %d %q (Retry-After %q), want 429 saying when to try again", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	bobTok, _, err := st.CreateToken(ctx, "bob", "phone")
	if err != nil {
		t.Fatal(err)
	}
	e.mustConnect(t, bobTok).names(t)
}
