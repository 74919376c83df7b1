// Package host is the agenthost host: it launches extensions (as processes
// over go-plugin, or as Go values in process), registers their tools, and
// serves those tools to users.
//
// # Embedding
//
//	cfg, err := host.LoadConfig("agenthost.json")
//	if err != nil { ... }
//	h, err := host.New(ctx, cfg, &host.Options{Logger: logger})
//	if err != nil { ... }
//	defer h.Close()
//	tools, err := h.Tools(ctx, "alice")
//	res, err := h.Call(ctx, "alice", "conversation-1", "notes/add_note", json.RawMessage(`{"text":"hi"}`))
//
// Package [github.com/agenthost/agenthost/host/serve] serves a host to
// agents and people: the MCP endpoint, the settings UI, the JSON API and
// the status page.
//
// # Extensions
//
// Each extension in the config is a binary started with go-plugin: AutoMTLS
// on, an optional sha256 pin (a mismatch refuses to start it), no host
// environment but a short allowlist, and the child dies with the host. If
// it crashes, in-flight calls fail with [ext.ErrUnavailable], the host
// restarts it once with backoff however many callers saw the crash, then
// describes and configures it again and re-activates the users that were
// active.
//
// # Concurrency
//
// A [Host] is safe for concurrent use. It owns every extension process and
// every goroutine it starts; [Host.Close] stops them all and waits.
package host
