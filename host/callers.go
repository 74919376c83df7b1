package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// callerTel is the telemetry inner calls are recorded in (nil: none).
type callerTel = atomic.Pointer[telemetry.T]

// SetTelemetry gives the host the telemetry serve keeps for /mcp, so that
// calls an extension makes as a caller ([ext.CallerTools], code mode's
// inner calls) are in the same histogram and spans as /mcp's calls.
func (h *Host) SetTelemetry(t *telemetry.T) { h.callerTel.Store(t) }

// callers holds the handles of in-flight tool calls ([ext.CallToolRequest.Caller]):
// through one, the extension the call went to calls further tools as that
// call's caller ([ext.CallerTools]) while the call runs. Safe for
// concurrent use; the zero value is ready.
type callers struct {
	mu sync.Mutex
	m  map[string]*caller
}

// caller is what a handle stands for: the outer call's user, scope,
// credential and context (its cancellation ends the inner calls).
type caller struct {
	ctx  context.Context
	ext  string // the extension the outer call went to
	req  CallRequest
	tool string // the outer tool's name, for the audit log
}

// add registers a handle for the call req going to extension extName;
// release forgets it (when the call returns).
func (c *callers) add(ctx context.Context, extName string, req *CallRequest) (handle string, release func()) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	handle = hex.EncodeToString(b[:])
	cl := &caller{ctx: ctx, ext: extName, tool: req.Name, req: CallRequest{
		User: req.User, Conversation: req.Conversation, Scope: req.Scope.Clone(), Credential: req.Credential, SessionID: req.SessionID,
	}}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*caller{}
	}
	c.m[handle] = cl
	c.mu.Unlock()
	return handle, func() {
		c.mu.Lock()
		delete(c.m, handle)
		c.mu.Unlock()
	}
}

// get returns the in-flight call behind handle when extension extName
// received it.
func (c *callers) get(extName, handle string) (*caller, error) {
	c.mu.Lock()
	cl := c.m[handle]
	c.mu.Unlock()
	if cl == nil || cl.ext != extName || handle == "" {
		return nil, fmt.Errorf("no call in flight for this caller handle (it ended, or was never this extension's): %w", ext.ErrNotFound)
	}
	return cl, nil
}

var _ ext.CallerTools = (*hostServices)(nil)

// ListCallerTools implements [ext.CallerTools]: the caller's tools within
// its scope, every exposure, but this extension's own.
func (s *hostServices) ListCallerTools(ctx context.Context, handle string) ([]ext.Tool, error) {
	cl, err := s.h.callers.get(s.ext, handle)
	if err != nil {
		return nil, err
	}
	tools, err := s.h.Tools(ctx, cl.req.User)
	if err != nil {
		return nil, err
	}
	out := make([]ext.Tool, 0, len(tools))
	for _, t := range tools {
		if t.Extension != s.ext && cl.req.Scope.AllowsTool(t.Name) {
			out = append(out, t.Tool)
		}
	}
	return out, nil
}

// CallCallerTool implements [ext.CallerTools]: the call goes the way an
// /mcp call of the caller goes ([Host.CallTool]), within its scope, with
// its credential named in the audit log beside the outer tool, and ends
// when the outer call ends.
func (s *hostServices) CallCallerTool(ctx context.Context, req *ext.CallerCallRequest) (*ext.CallToolResult, error) {
	cl, err := s.h.callers.get(s.ext, req.Caller)
	if err != nil {
		return nil, err
	}
	if t, ok := s.h.reg.lookup(cl.req.User, req.Name); ok && t.Extension == s.ext {
		return nil, fmt.Errorf("tool %q is extension %q's own: it may not call itself as its caller: %w", req.Name, s.ext, ext.ErrPermission)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(cl.ctx, func() { cancel(fmt.Errorf("the outer call of %q ended: %w", cl.tool, context.Cause(cl.ctx))) })
	defer stop()
	inner := cl.req
	inner.Scope = cl.req.Scope.Clone()
	inner.Name, inner.Arguments = req.Name, req.Arguments
	cred := inner.Credential
	if cred == "" {
		cred = "api"
	}
	inner.Credential = cred + " via " + cl.tool
	ctx, _, span := s.h.callerTel.Load().StartCall(ctx, telemetry.Call{Tool: req.Name}, nil)
	res, err := s.h.CallTool(ctx, &inner)
	switch {
	case err != nil:
		span.End("error")
	case res.IsError:
		span.End("tool_error")
	default:
		span.End("")
	}
	return res, err
}
