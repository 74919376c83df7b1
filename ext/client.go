package ext

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/ext/internal/extpb"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// Client is the host's handle on an extension running in another process.
// It implements [Extension] and every capability interface; a capability
// the extension did not list answers [ErrUnimplemented] from the far side.
// Errors that crossed the wire wrap the matching sentinel, so errors.Is
// works; a crashed extension fails calls with [ErrUnavailable].
//
// A Client is safe for concurrent use. It is created by the go-plugin
// client (see [HostPlugins]) and lives as long as that connection.
type Client struct {
	client extpb.ExtensionClient
	broker *plugin.GRPCBroker
	done   context.Context
	opts   ClientOptions

	mu          sync.Mutex
	hostStarted bool
	hostSrv     *hostServer
	calls       *callClient // the call channel, opened on first use
	callsErr    error
	// callParams is set by Describe when the extension's carrier reads a
	// tools/call's raw params (CallOpen.call_params).
	callParams atomic.Bool
}

// Compile-time guards: the client carries every capability.
var (
	_ Extension         = (*Client)(nil)
	_ ToolCaller        = (*Client)(nil)
	_ UserLifecycle     = (*Client)(nil)
	_ ServiceProvider   = (*Client)(nil)
	_ StatusReporter    = (*Client)(nil)
	_ Reconfigurer      = (*Client)(nil)
	_ ActionRunner      = (*Client)(nil)
	_ PromptProvider    = (*Client)(nil)
	_ ResourceProvider  = (*Client)(nil)
	_ Completer         = (*Client)(nil)
	_ TaskHandler       = (*Client)(nil)
	_ SessionListener   = (*Client)(nil)
	_ Authorizer        = (*Client)(nil)
	_ SettingsValidator = (*Client)(nil)
)

// callChannel returns the call channel: the socketpair handed over at
// launch, or else a Calls stream opened now and kept for the connection.
func (c *Client) callChannel() (*callClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls != nil || c.callsErr != nil {
		return c.calls, c.callsErr
	}
	fc, err := callsOverStream(c.done, c.client)
	if err != nil {
		return nil, err
	}
	c.calls = newCallClient(fc, c.hostImpl)
	go func() {
		<-c.done.Done()
		c.calls.close()
	}()
	return c.calls, nil
}

// hostImpl returns the host's services the extension was configured with
// (nil before Configure).
func (c *Client) hostImpl() Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hostSrv == nil {
		return nil
	}
	return c.hostSrv.impl
}

// call runs one call on the call channel.
func (c *Client) call(ctx context.Context, open *extpb.CallOpen, sess Session) (*extpb.CallEnd, error) {
	cc, err := c.callChannel()
	if err != nil {
		return nil, &notDelivered{msg: err.Error()}
	}
	sess = SessionOf(sess)
	open.Capabilities = sess.Capabilities()
	end, err := cc.do(ctx, open, sess)
	if err != nil {
		return nil, err
	}
	switch {
	case end.GetRpcError() != nil:
		return nil, rpcErrorFromProto(end.GetRpcError())
	case end.GetCode() != 0:
		return nil, errorOf(end.GetCode(), end.GetError())
	}
	return end, nil
}

// Done is closed when the extension process has exited (a crash, or the
// end of the connection).
func (c *Client) Done() <-chan struct{} { return c.done.Done() }

// Describe implements [Extension].
func (c *Client) Describe(ctx context.Context) (*Descriptor, error) {
	resp, err := c.client.Describe(ctx, &extpb.DescribeRequest{})
	if err != nil {
		return nil, wireErr(ctx, err)
	}
	d := descriptorFromProto(resp.GetDescriptor_())
	if d == nil {
		return nil, fmt.Errorf("extension sent no descriptor: %w", ErrUnavailable)
	}
	if d.ProtocolVersion != ProtocolVersion {
		return nil, fmt.Errorf("extension speaks protocol %d, host speaks %d: %w", d.ProtocolVersion, ProtocolVersion, ErrUnimplemented)
	}
	c.callParams.Store(resp.GetCallParams())
	return d, nil
}

// Configure implements [Extension]. It serves req.Host to the extension
// through the go-plugin broker; that happens once per connection, so
// Configure may be called only once.
func (c *Client) Configure(ctx context.Context, req *ConfigureRequest) error {
	if req == nil || req.Host == nil {
		return fmt.Errorf("ext: Client.Configure: nil request or Host: %w", ErrInvalidArgument)
	}
	c.mu.Lock()
	if c.hostStarted {
		c.mu.Unlock()
		return fmt.Errorf("ext: Client.Configure called twice: %w", ErrInvalidArgument)
	}
	c.hostStarted = true
	c.hostSrv = &hostServer{impl: req.Host, fds: c.opts.fdSender}
	id := c.broker.NextId()
	srv := c.hostSrv
	c.mu.Unlock()

	// The broker goroutine ends when the connection closes (go-plugin's
	// Kill closes the broker); GracefulStop then waits for open service
	// streams, which end because their processes and contexts end with it.
	go c.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := grpc.NewServer(append(opts, errorInterceptors()...)...)
		extpb.RegisterHostServer(s, srv)
		return s
	})
	var transports []string
	if c.opts.fdSender != nil {
		transports = append(transports, transportFD)
	}
	transports = append(transports, transportStream)
	_, err := c.client.Configure(ctx, &extpb.ConfigureRequest{
		Config: req.Config, HostBrokerId: id, Name: req.Name, ServiceTransports: transports, BaseDir: req.BaseDir,
		PublicUrl: req.PublicURL, ListenAddr: req.ListenAddr, CallerFrames: true,
	})
	return wireErr(ctx, err)
}

// Reconfigure implements [Reconfigurer].
func (c *Client) Reconfigure(ctx context.Context, req *ReconfigureRequest) error {
	_, err := c.client.Reconfigure(ctx, &extpb.ReconfigureRequest{Config: req.Config, DryRun: req.DryRun})
	return wireErr(ctx, err)
}

// Shutdown implements [Extension].
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.client.Shutdown(ctx, &extpb.ShutdownRequest{})
	return wireErr(ctx, err)
}

// CallTool implements [ToolCaller]. The result arrives as Raw. The
// client's params (req.Params) go alone when the extension's carrier reads
// them (it reads Arguments, ProgressToken, Meta and Task from them), else
// the fields go.
func (c *Client) CallTool(ctx context.Context, req *CallToolRequest) (*CallToolResult, error) {
	open := &extpb.CallOpen{
		Method: methodCallTool, UserId: req.User, ConversationId: req.Conversation, Name: req.Name,
		Scope: scopeToProto(req.Scope), Caller: req.Caller,
	}
	switch {
	case len(req.Params) > 0 && c.callParams.Load():
		open.CallParams = req.Params
	case c.callParams.Load() || len(req.ProgressToken) == 0:
		open.Params, open.ProgressToken, open.Meta, open.Task = req.Arguments, req.ProgressToken, req.Meta, req.Task
	default:
		// An extension built before call_params reads meta (field 7) as
		// the rest of the client's _meta, without its progress token.
		_, rest, err := mcpwire.SplitProgressToken(req.Meta)
		if err != nil {
			return nil, fmt.Errorf("tool %q: the client's _meta: %w", req.Name, err)
		}
		open.Params, open.ProgressToken, open.Meta, open.Task = req.Arguments, req.ProgressToken, rest, req.Task
	}
	end, err := c.call(ctx, open, req.Session)
	if err != nil {
		return nil, err
	}
	if len(end.GetResult()) == 0 {
		return nil, fmt.Errorf("extension sent an empty result for tool %q: %w", req.Name, ErrUnavailable)
	}
	return &CallToolResult{Raw: end.GetResult(), IsError: end.GetIsError(), Details: raw(end.GetDetails())}, nil
}

// GetPrompt implements [PromptProvider].
func (c *Client) GetPrompt(ctx context.Context, req *GetPromptRequest) (json.RawMessage, error) {
	end, err := c.call(ctx, &extpb.CallOpen{
		Method: methodGetPrompt, UserId: req.User, ConversationId: req.Conversation, Name: req.Name, Params: req.Arguments,
	}, req.Session)
	if err != nil {
		return nil, err
	}
	return raw(end.GetResult()), nil
}

// ReadResource implements [ResourceProvider].
func (c *Client) ReadResource(ctx context.Context, req *ReadResourceRequest) (json.RawMessage, error) {
	end, err := c.call(ctx, &extpb.CallOpen{
		Method: methodReadResource, UserId: req.User, ConversationId: req.Conversation, Name: req.URI,
	}, req.Session)
	if err != nil {
		return nil, err
	}
	return raw(end.GetResult()), nil
}

// SubscribeResource implements [ResourceProvider].
func (c *Client) SubscribeResource(ctx context.Context, req *SubscribeRequest) error {
	_, err := c.client.SubscribeResource(ctx, &extpb.SubscribeResourceRequest{UserId: req.User, Uri: req.URI, Unsubscribe: req.Unsubscribe})
	return wireErr(ctx, err)
}

// Complete implements [Completer].
func (c *Client) Complete(ctx context.Context, req *CompleteRequest) (json.RawMessage, error) {
	end, err := c.call(ctx, &extpb.CallOpen{Method: methodComplete, UserId: req.User, Params: req.Params}, req.Session)
	if err != nil {
		return nil, err
	}
	return raw(end.GetResult()), nil
}

// HandleTask implements [TaskHandler].
func (c *Client) HandleTask(ctx context.Context, req *TaskRequest) (json.RawMessage, error) {
	end, err := c.call(ctx, &extpb.CallOpen{Method: req.Method, UserId: req.User, Params: req.Params}, req.Session)
	if err != nil {
		return nil, err
	}
	return raw(end.GetResult()), nil
}

// UserToolsChanged implements [UserToolsWatcher].
func (c *Client) UserToolsChanged(ctx context.Context, user string, tools []Tool) error {
	_, err := c.client.UserToolsChanged(ctx, &extpb.UserToolsChangedRequest{UserId: user, Tools: toolsToProto(tools)})
	return wireErr(ctx, err)
}

// SessionNotify implements [SessionListener].
func (c *Client) SessionNotify(ctx context.Context, user, method string, params json.RawMessage) error {
	_, err := c.client.SessionNotify(ctx, &extpb.SessionNotifyRequest{UserId: user, Method: method, Params: params})
	return wireErr(ctx, err)
}

// BeginAuth implements [Authorizer].
func (c *Client) BeginAuth(ctx context.Context, req *BeginAuthRequest) (*BeginAuthResult, error) {
	resp, err := c.client.BeginAuth(ctx, beginAuthRequestToProto(req))
	if err != nil {
		return nil, wireErr(ctx, err)
	}
	return beginAuthResultFromProto(resp), nil
}

// CompleteAuth implements [Authorizer].
func (c *Client) CompleteAuth(ctx context.Context, req *CompleteAuthRequest) (*CompleteAuthResult, error) {
	resp, err := c.client.CompleteAuth(ctx, completeAuthRequestToProto(req))
	if err != nil {
		return nil, wireErr(ctx, err)
	}
	return completeAuthResultFromProto(resp), nil
}

// ValidateSettings implements [SettingsValidator]; the user's groups
// travel from ctx ([WithUserGroups]).
func (c *Client) ValidateSettings(ctx context.Context, req *ValidateSettingsRequest) error {
	_, err := c.client.ValidateSettings(ctx, &extpb.ValidateSettingsRequest{UserId: req.User, Section: req.Section, Values: req.Values,
		Groups: UserGroups(ctx)})
	return wireErr(ctx, err)
}

// Activate implements [UserLifecycle]; the user's groups and snapshot
// travel from ctx ([WithUserGroups], [WithUserSnapshot]).
func (c *Client) Activate(ctx context.Context, user string) error {
	_, err := c.client.Activate(ctx, &extpb.ActivateRequest{UserId: user, Groups: UserGroups(ctx),
		Snapshot: snapshotToPB(ActivationSnapshot(ctx))})
	return wireErr(ctx, err)
}

// Retire implements [UserLifecycle].
func (c *Client) Retire(ctx context.Context, user, name string) error {
	_, err := c.client.Retire(ctx, &extpb.RetireRequest{UserId: user, Name: name})
	return wireErr(ctx, err)
}

// ReconcileAll implements [UserLifecycle].
func (c *Client) ReconcileAll(ctx context.Context) error {
	_, err := c.client.ReconcileAll(ctx, &extpb.ReconcileAllRequest{})
	return wireErr(ctx, err)
}

// StartService implements [ServiceProvider].
func (c *Client) StartService(ctx context.Context, name, user string) (*ProcessSpec, error) {
	resp, err := c.client.StartService(ctx, &extpb.StartServiceRequest{Name: name, UserId: user})
	if err != nil {
		return nil, wireErr(ctx, err)
	}
	return processSpecFromProto(resp.GetSpec()), nil
}

// Status implements [StatusReporter].
func (c *Client) Status(ctx context.Context, user string) ([]StatusEntry, error) {
	resp, err := c.client.Status(ctx, &extpb.StatusRequest{UserId: user})
	if err != nil {
		return nil, wireErr(ctx, err)
	}
	out := make([]StatusEntry, 0, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		if e != nil {
			out = append(out, *statusEntryFromProto(e))
		}
	}
	return out, nil
}

// RunAction implements [ActionRunner].
func (c *Client) RunAction(ctx context.Context, req *ActionRequest) (string, error) {
	resp, err := c.client.RunAction(ctx, &extpb.RunActionRequest{Caller: req.Caller, UserId: req.User, Name: req.Name, Action: req.Action})
	if err != nil {
		return "", wireErr(ctx, err)
	}
	return resp.GetMessage(), nil
}

// wireErr maps an error of a call that crossed the wire. A call cancelled
// while the caller's ctx is still live was cut by the connection (the
// extension crashed or the connection is closing): that is unavailable,
// not the caller's cancellation.
func wireErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil {
		st := status.Convert(err)
		switch {
		case st.Code() == codes.Canceled && st.Message() == clientConnClosing:
			// The connection was closed before the call went out.
			return &notDelivered{msg: "the connection to the extension is closed"}
		case st.Code() == codes.Unavailable && strings.Contains(st.Message(), dialFailure):
			// The extension's socket refused the connection: the call
			// was never sent.
			return &notDelivered{msg: "the extension is not accepting connections"}
		}
	}
	err = fromStatus(err)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("%v: %w", err, ErrUnavailable)
	}
	return err
}

// clientConnClosing is grpc-go's message for a call made on a closed
// ClientConn (its ErrClientConnClosing, deprecated as an API but still
// what Invoke returns before it sends anything).
const clientConnClosing = "grpc: the client connection is closing"

// dialFailure is in grpc-go's message for a call that failed because the
// connection could not be (re)established, before anything was sent.
const dialFailure = "error while dialing"

// notDelivered is a call that never left the host.
type notDelivered struct{ msg string }

func (e *notDelivered) Error() string { return e.msg }
func (e *notDelivered) Unwrap() error { return ErrUnavailable }

// NotDelivered reports whether err means the call never reached the
// extension (its connection was already closed, e.g. by a crash): the
// host may then send it again, whatever the tool's replay safety, since
// nothing ran.
func NotDelivered(err error) bool {
	var nd *notDelivered
	return errors.As(err, &nd)
}
