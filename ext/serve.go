package ext

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// stderr is the process's real stderr, captured before go-plugin's Serve
// replaces os.Stderr with a pipe. Lines written here in hclog's JSON shape
// reach the host's structured log with their level and attributes.
var stderr = os.Stderr

// Logger returns a structured logger for an extension process. Its lines
// reach the host's log, tagged with the extension's name. Never log a
// secret.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lvl, _ := a.Value.Any().(slog.Level)
				name := "info"
				switch {
				case lvl < slog.LevelInfo:
					name = "debug"
				case lvl >= slog.LevelError:
					name = "error"
				case lvl >= slog.LevelWarn:
					name = "warn"
				}
				return slog.String("@level", name)
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	}))
}

// ServeOption configures [Serve]. Only package ext can create one.
type ServeOption interface{ apply(*serveConfig) }

type serveConfig struct {
	test        *plugin.ServeTestConfig
	fdChannel   *os.File
	callChannel *os.File
}

type callChannelOption struct{ f *os.File }

func (o callChannelOption) apply(c *serveConfig) { c.callChannel = o.f }

// WithCallChannel names the extension end of the call channel
// ([NewCallChannel]) directly, instead of through [EnvCallChannel]. Serve
// takes ownership of f.
func WithCallChannel(f *os.File) ServeOption { return callChannelOption{f} }

type fdChannelOption struct{ f *os.File }

func (o fdChannelOption) apply(c *serveConfig) { c.fdChannel = o.f }

// WithFDChannel names the extension end of the descriptor channel
// ([NewFDChannel]) directly, instead of through [EnvFDChannel]. Serve takes
// ownership of f.
func WithFDChannel(f *os.File) ServeOption { return fdChannelOption{f} }

type testOption struct{ c *plugin.ServeTestConfig }

func (o testOption) apply(c *serveConfig) { c.test = o.c }

// WithTestConfig runs Serve in go-plugin's test mode (in process, for
// reattaching from a test) instead of as a child of the host.
func WithTestConfig(c *plugin.ServeTestConfig) ServeOption { return testOption{c} }

// Serve runs impl as an extension process and returns when the host ends
// the connection. Call it from main; nothing may write to stdout before it,
// since stdout carries the go-plugin handshake. Use [Logger] for logs.
//
//	func main() { ext.Serve(myext.New()) }
func Serve(impl Extension, opts ...ServeOption) {
	if impl == nil {
		fmt.Fprintln(stderr, "ext: Serve: nil Extension")
		os.Exit(1)
	}
	var cfg serveConfig
	for _, o := range opts {
		o.apply(&cfg)
	}
	p := &grpcPlugin{impl: impl, callers: &callerCalls{}}
	fdFile := cfg.fdChannel
	if v := os.Getenv(EnvFDChannel); v != "" && fdFile == nil && cfg.test == nil {
		if fd, err := strconv.Atoi(v); err == nil {
			fdFile = os.NewFile(uintptr(fd), "agenthost-fd-channel")
		}
	}
	if fdFile != nil {
		r, err := newFDReceiver(fdFile)
		if err != nil {
			Logger().Warn("descriptor channel unusable; service bytes will travel over gRPC", "error", err)
		} else {
			p.fds = r
			defer r.close()
		}
	}
	callFile := cfg.callChannel
	if v := os.Getenv(EnvCallChannel); v != "" && callFile == nil && cfg.test == nil {
		if fd, err := strconv.Atoi(v); err == nil {
			callFile = os.NewFile(uintptr(fd), "agenthost-call-channel")
		}
	}
	if callFile != nil {
		fc, err := newSockFrames(callFile)
		if err != nil {
			Logger().Warn("call channel unusable; calls will travel over gRPC", "error", err)
		} else {
			// The channel's server runs until the host closes its end (or
			// the process ends); Serve waits for it and its calls.
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := serveCalls(context.Background(), fc, impl, p.callers); err != nil {
					Logger().Error("call channel failed", "error", err)
				}
			}()
			defer func() {
				_ = fc.close()
				<-done
			}()
		}
	}
	var logger hclog.Logger // nil: go-plugin's default, to stderr
	if cfg.test != nil {
		logger = hclog.NewNullLogger()
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginName: p},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, errorInterceptors()...)...)
		},
		Test:   cfg.test,
		Logger: logger,
	})
	_ = stderr.Sync()
}
