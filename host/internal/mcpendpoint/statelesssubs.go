package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// Resource subscriptions on the stateless revision (2026-07-28, SEP-2575):
// a client subscribes by holding a subscriptions/listen request open with
// notifications.resourceSubscriptions; go-sdk acknowledges it, calls the
// server's SubscribeHandler for each URI (UnsubscribeHandler when the
// stream ends) and sends notifications/resources/updated on that stream
// when the server calls ResourceUpdated. statelessSubs is that server's
// side here: it counts the listeners per URI, asks the host for the
// resource's updates (Host.SubscribeResource) for as long as one listens,
// and is attached to the host as one session of the user (while any URI
// is listened to) whose updates it hands to go-sdk. Safe for concurrent
// use.
type statelessSubs struct {
	x *sdkServer

	mu     sync.Mutex
	n      map[string]int // URI → listeners
	detach func()
}

func (x *sdkServer) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	if x.u.scope != nil && !x.u.cat.Load().reaches(uri) {
		return fmt.Errorf("resource %q: %w", uri, ext.ErrNotFound)
	}
	s := x.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[uri] == 0 {
		if err := x.e.host.SubscribeResource(ctx, x.u.user, uri, false); err != nil {
			return err
		}
	}
	s.n[uri]++
	if s.detach == nil {
		_, s.detach = x.e.host.AttachSession(x.u.user, s)
	}
	return nil
}

func (x *sdkServer) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	uri := req.Params.URI
	s := x.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[uri] == 0 {
		return nil
	}
	s.n[uri]--
	if s.n[uri] == 0 {
		delete(s.n, uri)
		// The listen stream has ended: its context too.
		if err := x.e.host.SubscribeResource(context.WithoutCancel(ctx), x.u.user, uri, true); err != nil {
			x.e.log.Warn("mcp: ending a resource subscription", "user", x.u.user, "uri", uri, "err", err)
		}
	}
	if len(s.n) == 0 && s.detach != nil {
		s.detach()
		s.detach = nil
	}
	return nil
}

// Capabilities implements [ext.Session]: the listeners' capabilities are
// go-sdk's; this session asks nothing.
func (s *statelessSubs) Capabilities() json.RawMessage { return json.RawMessage("{}") }

// Notify implements [ext.Session]: updates of resources listened to go to
// go-sdk, which sends them on the listening streams; the rest is dropped
// (the revision has no stream outside a request for them).
func (s *statelessSubs) Notify(ctx context.Context, method string, params json.RawMessage) error {
	if method != ext.MethodResourceUpdated {
		return nil
	}
	var p mcp.ResourceUpdatedNotificationParams
	if err := json.Unmarshal(params, &p); err != nil {
		return fmt.Errorf("resource updated params: %w", ext.Mark(err, ext.ErrInvalidArgument))
	}
	s.mu.Lock()
	listened := s.n[p.URI] > 0
	s.mu.Unlock()
	if !listened {
		return nil
	}
	return s.x.srv.ResourceUpdated(ctx, &p)
}

// Request implements [ext.Session]: the stateless revision asks clients
// nothing.
func (s *statelessSubs) Request(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
	return nil, fmt.Errorf("protocol revision %s has no %s requests to the client: %w", mcpwire.V20260728, method, ext.ErrUnimplemented)
}

var _ ext.Session = (*statelessSubs)(nil)
