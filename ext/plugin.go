package ext

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// Handshake is the go-plugin handshake between the host and an extension.
// The cookie is a UX feature (running an extension by hand prints a hint),
// not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "AGENTHOST_EXTENSION",
	MagicCookieValue: "9b1c5d0e-agenthost-ext-v1",
}

// PluginName is the name under which the extension is dispensed.
const PluginName = "extension"

// ClientOptions configures the host side of the wire. The zero value
// relays service bytes over gRPC.
type ClientOptions struct {
	// FDChannel is the host end of [NewFDChannel]. When set, service
	// stdio passes to the extension as descriptors. The Client takes
	// ownership and closes it when the connection ends.
	FDChannel *os.File
	// CallChannel is the host end of [NewCallChannel]. When set, calls
	// travel on it instead of on a gRPC stream. The Client takes
	// ownership and closes it when the connection ends.
	CallChannel *os.File

	fdSender *fdSender
	calls    *sockFrames
	_        struct{}
}

// HostPlugins returns the plugin set the host passes to go-plugin's
// ClientConfig.Plugins. Dispensing [PluginName] yields a [*Client].
func HostPlugins(opts *ClientOptions) (plugin.PluginSet, error) {
	var o ClientOptions
	if opts != nil && opts.FDChannel != nil {
		s, err := newFDSender(opts.FDChannel)
		if err != nil {
			return nil, err
		}
		_ = opts.FDChannel.Close() // FileConn dup'd it
		o.fdSender = s
	}
	if opts != nil && opts.CallChannel != nil {
		fc, err := newSockFrames(opts.CallChannel)
		if err != nil {
			if o.fdSender != nil {
				_ = o.fdSender.close()
			}
			return nil, err
		}
		o.calls = fc
	}
	return plugin.PluginSet{PluginName: &grpcPlugin{clientOpts: o}}, nil
}

// grpcPlugin is the go-plugin glue for both sides.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl       Extension    // extension side
	fds        *fdReceiver  // extension side
	callers    *callerCalls // extension side
	clientOpts ClientOptions
}

// GRPCServer registers the extension's service (extension side).
func (p *grpcPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	extpb.RegisterExtensionServer(s, &extensionServer{impl: p.impl, broker: broker, fds: p.fds, callers: p.callers})
	return nil
}

// GRPCClient returns the host's [*Client] (host side). ctx is done when the
// extension process exits.
func (p *grpcPlugin) GRPCClient(ctx context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	c := &Client{client: extpb.NewExtensionClient(conn), broker: broker, done: ctx, opts: p.clientOpts}
	if fc := p.clientOpts.calls; fc != nil {
		c.calls = newCallClient(fc, c.hostImpl)
	}
	// The descriptor sender and the call channel live as long as the
	// connection.
	go func() {
		<-ctx.Done()
		if s := p.clientOpts.fdSender; s != nil {
			_ = s.close()
		}
		if c.calls != nil {
			c.calls.close()
		}
	}()
	return c, nil
}

// Dispense returns the [*Client] from a go-plugin client protocol, with a
// clear error instead of an unchecked type assertion.
func Dispense(rpc plugin.ClientProtocol) (*Client, error) {
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		return nil, fmt.Errorf("dispensing the extension: %w", err)
	}
	c, ok := raw.(*Client)
	if !ok {
		return nil, fmt.Errorf("dispensing the extension: got %T, want *ext.Client", raw)
	}
	return c, nil
}
