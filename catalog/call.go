package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/ext"
)

// disabledResult is the result of a call to a retired server.
func disabledResult(server string) *ext.CallToolResult {
	return ext.ErrorResult("MCP server %q is disabled", server)
}

// Call calls a tool by its full name, "server/tool", for user. The name is
// split at its first "/": server names never contain one, tool names may.
//
// An empty user is refused before anything else. An unknown tool is
// [ext.ErrNotFound]. A retired server answers the error result
// `MCP server "S" is disabled`; a quarantined one an error result with its
// reason; a call that outlives the server's timeout an error result naming
// the server and the timeout. An error return means the call itself broke
// (ctx ended, the engine is closed).
func (e *Engine) Call(ctx context.Context, user, fullName string, args json.RawMessage) (*ext.CallToolResult, error) {
	if user == "" {
		return nil, fmt.Errorf("calling %q: caller not identified: %w", fullName, ext.ErrPermission)
	}
	server, tool, ok := strings.Cut(fullName, "/")
	if !ok || server == "" || tool == "" {
		return nil, fmt.Errorf("tool %q: %w", fullName, ext.ErrNotFound)
	}
	u, err := e.existingUser(user)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, fmt.Errorf("tool %q: %w", fullName, ext.ErrNotFound)
	}
	u.mu.Lock()
	c := u.conns[server]
	if c == nil {
		disabled := u.disabled[server]
		q := u.quarantine[server]
		u.mu.Unlock()
		switch {
		case q != nil:
			return ext.ErrorResult("MCP server %q is unavailable: %s", server, q.reason), nil
		case disabled:
			return disabledResult(server), nil
		}
		return nil, fmt.Errorf("tool %q: %w", fullName, ext.ErrNotFound)
	}
	if _, ok := c.index[tool]; !ok {
		u.mu.Unlock()
		return nil, fmt.Errorf("tool %q: %w", fullName, ext.ErrNotFound)
	}
	c.inflight++
	timeout := c.decl.Timeout
	if timeout <= 0 {
		timeout = e.opts.DefaultCallTimeout
	}
	u.mu.Unlock()
	defer e.release(c)

	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := c.c.CallTool(cctx, user, tool, args)
	switch {
	case err == nil && res != nil:
		return res, nil
	case err == nil:
		return ext.ErrorResult("MCP server %q returned no result for tool %q", server, tool), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("calling %q: %w", fullName, ctx.Err())
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return ext.ErrorResult("MCP server %q did not answer tool %q within %v", server, tool, timeout), nil
	}
	return ext.ErrorResult("MCP server %q failed to run tool %q: %v", server, tool, err), nil
}

// release ends a call on c; the last call on a retired connection closes
// it.
func (e *Engine) release(c *conn) {
	u := c.u
	u.mu.Lock()
	c.inflight--
	closeNow := c.state == stateRetiring && c.inflight == 0
	if closeNow {
		c.state = stateClosing
		delete(u.retiring, c)
	}
	u.mu.Unlock()
	if closeNow {
		e.closeConns([]*conn{c})
	}
}

// Status reports on one user's servers, or on every active user's when
// user is empty: connected, retiring (draining), quarantined (with the
// reason and the next retry) and left out (with the reason).
func (e *Engine) Status(userID string) []ext.StatusEntry {
	e.mu.Lock()
	var users []*user
	if userID != "" {
		if u := e.users[userID]; u != nil {
			users = append(users, u)
		}
	} else {
		for _, u := range e.users {
			users = append(users, u)
		}
	}
	e.mu.Unlock()
	var out []ext.StatusEntry
	for _, u := range users {
		u.mu.Lock()
		for name, c := range u.conns {
			out = append(out, ext.StatusEntry{User: u.id, Name: name, State: "connected", Tools: len(c.built)})
		}
		for c := range u.retiring {
			out = append(out, ext.StatusEntry{User: u.id, Name: c.name, State: "retiring",
				Detail: fmt.Sprintf("draining %d running call(s)", c.inflight)})
		}
		for name, q := range u.quarantine {
			out = append(out, ext.StatusEntry{User: u.id, Name: name, State: "quarantined", Reason: q.reason,
				NextRetry: q.next, Detail: fmt.Sprintf("failed %d time(s)", q.failures)})
		}
		for _, p := range u.problems {
			out = append(out, ext.StatusEntry{User: u.id, Name: p.Server, State: "error", Reason: p.Reason})
		}
		u.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ext.StatusEntry) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.State, b.State)
	})
	return out
}
