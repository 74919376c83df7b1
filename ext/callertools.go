package ext

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// CallerTools is the capability to list and call tools as the caller of
// an in-flight tools/call, and never wider: the same user, within the
// call's scope ([CallToolRequest.Scope]), with the same credential, only
// while that call runs. It is what code mode needs (a tool whose script
// calls the user's other tools), and unlike [UserActor] it needs no grant
// from the operator: a handle ([CallToolRequest.Caller]) reaches nothing
// its caller could not reach on /mcp. The [Host] an extension receives
// implements it, in process and over the wire; reach it with a type
// assertion:
//
//	ct, ok := host.(ext.CallerTools)
//
// What the host guarantees: a handle is valid only for the extension the
// call went to and only until that call returns (then [ErrNotFound]); an
// inner call goes the way an /mcp call of the user goes (the user's
// registry, the server's quarantine, drain, timeout and result cap, the
// audit log naming the outer tool), ends when the outer call is cancelled,
// and may not reach the calling extension's own tools (no recursion). The
// list holds every exposure, codemode included: which of them the
// extension offers its caller is its own policy.
type CallerTools interface {
	// ListCallerTools returns the tools the caller may call.
	ListCallerTools(ctx context.Context, caller string) ([]Tool, error)
	// CallCallerTool calls one of them. The result arrives as Raw.
	CallCallerTool(ctx context.Context, req *CallerCallRequest) (*CallToolResult, error)
}

// CallerCallRequest is a call of a tool as the caller a handle names.
type CallerCallRequest struct {
	// Caller is the outer call's [CallToolRequest.Caller].
	Caller string
	// Name is the tool's host name, e.g. "notes/add".
	Name string
	// Arguments is a JSON object, raw (nil: {}).
	Arguments json.RawMessage
}

// unaryCallerCalls counts the CallerTools calls that went as gRPC calls
// (tests check that the call channel carried the others).
var unaryCallerCalls atomic.Int64

// callerTools returns the host's CallerTools, or an error saying it has none.
func (s *hostServer) callerTools() (CallerTools, error) {
	ct, ok := s.impl.(CallerTools)
	if !ok {
		return nil, fmt.Errorf("this host cannot call tools as a caller: %w", ErrUnimplemented)
	}
	return ct, nil
}

func (s *hostServer) ListCallerTools(ctx context.Context, req *extpb.ListCallerToolsRequest) (*extpb.ListToolsAsResponse, error) {
	ct, err := s.callerTools()
	if err != nil {
		return nil, err
	}
	tools, err := ct.ListCallerTools(ctx, req.GetCaller())
	if err != nil {
		return nil, err
	}
	return &extpb.ListToolsAsResponse{Tools: toolsToProto(tools)}, nil
}

func (s *hostServer) CallCallerTool(ctx context.Context, req *extpb.CallCallerToolRequest) (*extpb.CallToolAsResponse, error) {
	ct, err := s.callerTools()
	if err != nil {
		return nil, err
	}
	res, err := ct.CallCallerTool(ctx, &CallerCallRequest{Caller: req.GetCaller(), Name: req.GetName(), Arguments: raw(req.GetArguments())})
	if err != nil {
		return nil, err
	}
	b, err := res.JSON()
	if err != nil {
		return nil, err
	}
	return &extpb.CallToolAsResponse{Result: b, IsError: res.IsError}, nil
}

var _ CallerTools = (*hostClient)(nil)

// ListCallerTools implements [CallerTools] over the wire.
func (h *hostClient) ListCallerTools(ctx context.Context, caller string) ([]Tool, error) {
	resp, err := h.client.ListCallerTools(ctx, &extpb.ListCallerToolsRequest{Caller: caller})
	if err != nil {
		return nil, fromStatus(err)
	}
	return toolsFromProto(resp.GetTools()), nil
}

// CallCallerTool implements [CallerTools] over the wire: on the call
// channel, as a frame of the call the handle belongs to, when the host
// answers such frames and the call runs in this process (one write each
// way on the socket, no HTTP/2, TLS or per-call stream: the inner call of
// code mode costs what a call from /mcp costs); else as a gRPC call.
func (h *hostClient) CallCallerTool(ctx context.Context, req *CallerCallRequest) (*CallToolResult, error) {
	if h.callerFrames {
		if s := h.callers.get(req.Caller); s != nil {
			return s.callCaller(ctx, req.Name, req.Arguments)
		}
	}
	unaryCallerCalls.Add(1)
	resp, err := h.client.CallCallerTool(ctx, &extpb.CallCallerToolRequest{Caller: req.Caller, Name: req.Name, Arguments: req.Arguments})
	if err != nil {
		return nil, fromStatus(err)
	}
	return &CallToolResult{Raw: raw(resp.GetResult()), IsError: resp.GetIsError()}, nil
}
