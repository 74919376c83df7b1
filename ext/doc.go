// Package ext defines the contract between the agenthost host and its
// extensions, and carries it across a process boundary.
//
// # Writing an extension
//
// An extension implements [Extension] (describe, configure, shut down) and
// any of the optional capabilities, each its own small interface:
// [ToolCaller] ("tools"), [UserLifecycle] ("users"), [ServiceProvider]
// ("services"), [StatusReporter] ("status"), [PromptProvider] ("prompts"),
// [ResourceProvider] ("resources"), [Completer] ("completions"),
// [TaskHandler] ("tasks"), [SessionListener] ("sessions"), [Authorizer]
// ("auth": OAuth sign-ins the host routes to a browser and back) and
// [SettingsValidator] ("validate": a user's settings checked before they
// are stored). Two capabilities are no interface: "sandbox" (its service
// processes are untrusted) and "snapshot" ([UserLifecycle.Activate] is
// handed the user's settings and secrets, [ActivationSnapshot], so
// activating needs no callback for them). It lists the capabilities
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
//     when the operator reloads the file and the extension's block
//     changed, [Reconfigurer.Reconfigure] (a dry run, then the change,
//     then Describe again); an extension without that capability is
//     restarted with its new block instead;
//  6. [Extension.Shutdown], idempotent and safe before Configure.
//
// If the process crashes, in-flight calls fail with [ErrUnavailable]; the
// host restarts it once, describes and configures it again and re-activates
// the users that were active.
//
// # Sessions
//
// Every request that has a client behind it — a tool call, a prompt, a
// resource read, a completion, a tasks/* request — carries that client's
// [Session]: through it the extension reports progress
// ([MethodProgress], under the client's own token, which the host keeps)
// and log messages, and asks the client for sampling, elicitation or its
// roots, with the answer routed back to the very request. A client that
// did not declare a capability makes Request fail with
// [ErrUnimplemented], so the extension can say so instead of its tool
// vanishing. Cancelling the request cancels its context on the far side.
// Outside requests, [Host.Notify] reaches every session of a user (log
// messages, resource updates) and [Host.RequestUser] asks the user's most
// recent capable session (roots a server asks for at connect).
// Everything an extension offers a user — tools, prompts, resources,
// resource templates, instructions — is published in one
// [Host.SetUserCatalog].
//
// # Acting as a user
//
// The [Host] also implements [UserActor]: list and call a user's tools
// within a [Scope], and mint and revoke a scoped, expiring token for the
// user's agent. The operator grants it per extension (actAsUsers); without
// the grant every method is [ErrPermission]. A tool call carries its
// caller's scope ([CallToolRequest.Scope]): an extension acting for the
// caller passes it on, and in the caller's conversation the host refuses
// anything wider.
//
// Narrower, and with no grant: the [Host] implements [CallerTools], which
// lists and calls tools as the caller of an in-flight tools/call (its
// handle, [CallToolRequest.Caller]), never wider and only while that call
// runs; an extension with the "usertools" capability ([UserToolsWatcher])
// is told each active user's tools as they change. Code mode
// (ext-codemode) is built on the two.
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
// [ErrInvalidArgument], [ErrUnimplemented] and [ErrBusy] map to gRPC codes in one place
// and back, so errors.Is works on both sides of the wire. A tool that fails
// is a result with IsError set ([ErrorResult]), not a Go error.
//
// # Helpers
//
// Package exttest runs the conformance suite and gives a fake host for
// tests. Package netguard refuses, at dial time, the addresses a
// user-supplied URL must not reach (loopback, private, link-local,
// metadata services, the host itself): an extension that connects where
// a user or a remote party says dials through it.
//
// # Concurrency
//
// [Client], [Host] and every store are safe for concurrent use. An
// extension's capability methods are called concurrently and must be too.
// The user ID always travels as an argument, never inside a context.
package ext
