package ext

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/ext/internal/extpb"
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
}

// Compile-time guards: the client carries every capability.
var (
	_ Extension       = (*Client)(nil)
	_ ToolCaller      = (*Client)(nil)
	_ UserLifecycle   = (*Client)(nil)
	_ ServiceProvider = (*Client)(nil)
	_ StatusReporter  = (*Client)(nil)
)

// Done is closed when the extension process has exited (a crash, or the
// end of the connection).
func (c *Client) Done() <-chan struct{} { return c.done.Done() }

// Describe implements [Extension].
func (c *Client) Describe(ctx context.Context) (*Descriptor, error) {
	resp, err := c.client.Describe(ctx, &extpb.DescribeRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	d := descriptorFromProto(resp.GetDescriptor_())
	if d == nil {
		return nil, fmt.Errorf("extension sent no descriptor: %w", ErrUnavailable)
	}
	if d.ProtocolVersion != ProtocolVersion {
		return nil, fmt.Errorf("extension speaks protocol %d, host speaks %d: %w", d.ProtocolVersion, ProtocolVersion, ErrUnimplemented)
	}
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
	})
	return fromStatus(err)
}

// Shutdown implements [Extension].
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.client.Shutdown(ctx, &extpb.ShutdownRequest{})
	return fromStatus(err)
}

// CallTool implements [ToolCaller].
func (c *Client) CallTool(ctx context.Context, req *CallToolRequest) (*CallToolResult, error) {
	resp, err := c.client.CallTool(ctx, callToolRequestToProto(req))
	if err != nil {
		return nil, fromStatus(err)
	}
	return callToolResultFromProto(resp), nil
}

// Activate implements [UserLifecycle].
func (c *Client) Activate(ctx context.Context, user string) error {
	_, err := c.client.Activate(ctx, &extpb.ActivateRequest{UserId: user})
	return fromStatus(err)
}

// Retire implements [UserLifecycle].
func (c *Client) Retire(ctx context.Context, user, name string) error {
	_, err := c.client.Retire(ctx, &extpb.RetireRequest{UserId: user, Name: name})
	return fromStatus(err)
}

// ReconcileAll implements [UserLifecycle].
func (c *Client) ReconcileAll(ctx context.Context) error {
	_, err := c.client.ReconcileAll(ctx, &extpb.ReconcileAllRequest{})
	return fromStatus(err)
}

// StartService implements [ServiceProvider].
func (c *Client) StartService(ctx context.Context, name, user string) (*ProcessSpec, error) {
	resp, err := c.client.StartService(ctx, &extpb.StartServiceRequest{Name: name, UserId: user})
	if err != nil {
		return nil, fromStatus(err)
	}
	return processSpecFromProto(resp.GetSpec()), nil
}

// Status implements [StatusReporter].
func (c *Client) Status(ctx context.Context, user string) ([]StatusEntry, error) {
	resp, err := c.client.Status(ctx, &extpb.StatusRequest{UserId: user})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]StatusEntry, 0, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		if e != nil {
			out = append(out, *statusEntryFromProto(e))
		}
	}
	return out, nil
}
