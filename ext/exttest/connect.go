package exttest

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/agenthost/agenthost/ext"
)

// ConnectOptions configures [Connect].
type ConnectOptions struct {
	// FDPassing passes service descriptors over a socketpair instead of
	// relaying bytes over gRPC (unix only).
	FDPassing bool
	// CallChannel carries calls on a socketpair, as the host's supervisor
	// does, instead of on the gRPC Calls stream (unix only).
	CallChannel bool
	_           struct{}
}

// Connect serves impl over real gRPC inside the test process, through
// go-plugin's own Serve and reattach path, and returns the host's
// [*ext.Client] for it. Everything is torn down when the test ends.
func Connect(t testing.TB, impl ext.Extension, opts *ConnectOptions) *ext.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		serveOpts []ext.ServeOption
		copts     *ext.ClientOptions
	)
	copts = &ext.ClientOptions{}
	if opts != nil && opts.FDPassing {
		hostEnd, extEnd, err := ext.NewFDChannel()
		if err != nil {
			cancel()
			t.Fatalf("exttest: %v", err)
		}
		serveOpts = append(serveOpts, ext.WithFDChannel(extEnd))
		copts.FDChannel = hostEnd
	}
	if opts != nil && opts.CallChannel {
		hostEnd, extEnd, err := ext.NewCallChannel()
		if err != nil {
			cancel()
			t.Fatalf("exttest: %v", err)
		}
		serveOpts = append(serveOpts, ext.WithCallChannel(extEnd))
		copts.CallChannel = hostEnd
	}
	reattach := make(chan *plugin.ReattachConfig, 1)
	closed := make(chan struct{})
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		ext.Serve(impl, append(serveOpts, ext.WithTestConfig(&plugin.ServeTestConfig{
			Context: ctx, ReattachConfigCh: reattach, CloseCh: closed,
		}))...)
	}()
	var rc *plugin.ReattachConfig
	select {
	case rc = <-reattach:
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("exttest: extension did not start serving within 10s")
	}
	// The served side runs in this process: wait on its end instead of
	// go-plugin's pid poll, which would wait for this process forever.
	rc.ReattachFunc = func() (runner.AttachedRunner, error) { return &inProcessRunner{done: serveDone}, nil }
	plugins, err := ext.HostPlugins(copts)
	if err != nil {
		cancel()
		t.Fatalf("exttest: %v", err)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  ext.Handshake,
		Plugins:          plugins,
		Reattach:         rc,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Output: io.Discard}),
	})
	rpc, err := client.Client()
	if err != nil {
		cancel()
		t.Fatalf("exttest: connecting: %v", err)
	}
	c, err := ext.Dispense(rpc)
	if err != nil {
		cancel()
		t.Fatalf("exttest: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = c.Shutdown(sctx)
		// Stop the served side first (go-plugin's Serve stops its server
		// once), then close the host side: a reattached test client has no
		// process for Kill to stop, so close the protocol (broker,
		// connection) ourselves.
		cancel()
		<-closed
		<-serveDone
		_ = rpc.Close()
		client.Kill()
		// go-plugin's test mode never closes the stdio pipes it made for
		// Serve; their readers end when the garbage collector finalizes
		// the unreachable write ends. Collect now, so leak checks do not
		// depend on when the next collection happens to run.
		runtime.GC()
	})
	return c
}

// inProcessRunner stands for the extension "process" served in this test
// process: it ends when Serve returns.
type inProcessRunner struct{ done <-chan struct{} }

func (r *inProcessRunner) Wait(ctx context.Context) error {
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	return nil
}

func (r *inProcessRunner) Kill(context.Context) error                       { return nil }
func (r *inProcessRunner) ID() string                                       { return "" }
func (r *inProcessRunner) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (r *inProcessRunner) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }
