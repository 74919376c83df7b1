package extrunner

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// watchTTL is how long the resource watcher's token lives; it reconnects
// with a fresh one before (watchRenew), so that no token outlives its use
// by much.
const (
	watchTTL   = 15 * time.Minute
	watchRenew = 10 * time.Minute
)

// watchResource keeps a subscription to rs's resource on the host's own
// /mcp, as rs's user with a token scoped to the resource's server alone,
// and triggers rs at each notifications/resources/updated of its URI. It
// reconnects with a new token before the old one expires, and after an
// error (backing off), until shutdown.
func (e *Extension) watchResource(ctx context.Context, rs *runnerState) {
	defer e.wg.Done()
	backoff := time.Second
	for ctx.Err() == nil {
		err := e.watchOnce(ctx, rs)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.setWatch(rs, "not subscribed: "+err.Error())
			e.log.Warn("runner resource watch", "runner", rs.name, "user", rs.user, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
	}
}

func (e *Extension) setWatch(rs *runnerState, s string) {
	e.mu.Lock()
	rs.watch = s
	e.mu.Unlock()
}

// watchOnce subscribes with a fresh token until it is time to renew it
// (nil) or the connection breaks (the error).
func (e *Extension) watchOnce(parent context.Context, rs *runnerState) error {
	rt := rs.cfg.Resource
	ctx, cancel := context.WithTimeout(parent, watchRenew)
	defer cancel()
	tok, err := e.mint(ctx, rs.user, "runner:"+rs.name+":watch", &ext.Scope{Servers: []string{rt.Server}}, time.Now().Add(watchTTL))
	if err != nil {
		return fmt.Errorf("minting the watcher's token: %w", err)
	}
	defer e.revoke(tok.ID, "watcher renewed or stopped")
	broke := make(chan struct{})
	client := mcp.NewClient(&mcp.Implementation{Name: "agenthost-ext-runner", Version: Version}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if req.Params == nil || req.Params.URI != rt.URI {
				return
			}
			if r, err := e.Trigger(rs.user, rs.name, "resource "+rt.URI); err != nil {
				e.log.Warn("runner resource trigger", "runner", rs.name, "err", err)
			} else {
				e.log.Debug("runner resource trigger", "runner", rs.name, "result", r)
			}
		},
	})
	hc := &http.Client{Transport: bearer{token: tok.Token, next: http.DefaultTransport}}
	// go-sdk's default revision: on 2026-07-28 the subscription is a
	// subscriptions/listen stream the host serves (statelesssubs.go in
	// host/internal/mcpendpoint), on 2025-11-25 the session's stream.
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: strings.TrimRight(e.publicURL, "/") + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connecting to %s/mcp: %w", e.publicURL, err)
	}
	defer cs.Close()
	go func() { _ = cs.Wait(); close(broke) }()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: rt.URI}); err != nil {
		return fmt.Errorf("subscribing to %s: %w", rt.URI, err)
	}
	e.setWatch(rs, "subscribed")
	select {
	case <-ctx.Done():
		return nil
	case <-broke:
		return fmt.Errorf("the subscription's connection closed")
	}
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
