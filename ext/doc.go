// Package ext defines the contract between the agenthost host and its
// extensions, and carries it across a process boundary.
//
// # Writing an extension
//
// An extension implements [Extension] (describe, configure, shut down) and
// any of the optional capabilities, each its own small interface:
// [ToolCaller] ("tools"), [UserLifecycle] ("users"), [ServiceProvider]
// ("services") and [StatusReporter] ("status"). It lists the capabilities
// it implements in its [Descriptor]: across the wire a type assertion means
// nothing, so the descriptor is what the host trusts. A main function is
// one line:
//
//	func main() { ext.Serve(&hello{}) }
//
// # The lifecycle
//
// The host owns the extension process and drives it in this order:
//
//  1. spawn: the host starts the binary (go-plugin, AutoMTLS, an explicit
//     environment, the child dies with the host);
//  2. handshake: go-plugin's, on stdout; never print to stdout before
//     [Serve];
//  3. [Extension.Describe]: what the extension is and offers;
//  4. [Extension.Configure], once per connection: the operator's config
//     block (raw JSON, the extension validates it) and the [Host] services;
//  5. capability calls, concurrently: [ToolCaller.CallTool],
//     [UserLifecycle.Activate], [ServiceProvider.StartService], ...;
//  6. [Extension.Shutdown], idempotent and safe before Configure.
//
// If the process crashes, in-flight calls fail with [ErrUnavailable]; the
// host restarts it once, describes and configures it again and re-activates
// the users that were active.
//
// # Carriers
//
// The contract has two carriers that pass the same conformance suite
// (package exttest): in process, the host calls the Go value directly
// (embedding, tests); out of process, [Serve] on the extension side and
// [Client] on the host side speak gRPC (package agenthost.ext.v1) through
// go-plugin, with the host's services served back through the go-plugin
// broker once per connection. Every call takes a context whose
// cancellation crosses the wire. Tool arguments and results travel as raw
// JSON and are never decoded on the way.
//
// # Errors
//
// The sentinels [ErrNotFound], [ErrPermission], [ErrUnavailable],
// [ErrInvalidArgument] and [ErrUnimplemented] map to gRPC codes in one place
// and back, so errors.Is works on both sides of the wire. A tool that fails
// is a result with IsError set ([ErrorResult]), not a Go error.
//
// # Concurrency
//
// [Client], [Host] and every store are safe for concurrent use. An
// extension's capability methods are called concurrently and must be too.
// The user ID always travels as an argument, never inside a context.
package ext
