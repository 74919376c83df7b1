package ext

import (
	"context"
	"encoding/json"
	"time"
)

// ProtocolVersion is the version of the wire protocol (package
// agenthost.ext.v1). The host and an extension that disagree refuse to talk.
const ProtocolVersion = 1

// Extension is implemented by every extension.
//
// The host calls Describe first, then Configure once per connection, then
// any capability methods (concurrently), and Shutdown last.
type Extension interface {
	// Describe returns what the extension is and which capabilities it
	// offers. It may be called before Configure and more than once; it must
	// be fast and have no side effects.
	Describe(ctx context.Context) (*Descriptor, error)
	// Configure hands the extension its config block (untouched JSON from
	// the operator's file) and the host's services. An error here refuses
	// the extension: the host reports it and does not call it further.
	Configure(ctx context.Context, req *ConfigureRequest) error
	// Shutdown releases everything the extension holds. It may be called
	// more than once, concurrently, and before Configure, and honours the
	// ctx deadline.
	Shutdown(ctx context.Context) error
}

// ToolCaller is the "tools" capability: the extension runs tools it
// registered with [Host.SetUserTools] or [Host.SetSystemTools].
//
// CallTool is called concurrently. A tool that fails returns a result with
// IsError set; an error return means the call itself broke (an unknown tool
// is [ErrNotFound]).
type ToolCaller interface {
	CallTool(ctx context.Context, req *CallToolRequest) (*CallToolResult, error)
}

// UserLifecycle is the "users" capability: per-user state the host drives.
type UserLifecycle interface {
	// Activate makes the user's tools ready and publishes them. The host
	// calls it on a user's first use and again whenever that user's
	// settings or secrets for this extension change, so it also refreshes.
	Activate(ctx context.Context, user string) error
	// Retire withdraws one named resource (for ext-mcp: a server) of a
	// user; an empty name withdraws everything of that user (the host
	// deactivates them, e.g. when they went idle).
	Retire(ctx context.Context, user, name string) error
	// ReconcileAll refreshes every active user, for instance after the
	// operator's policy changed.
	ReconcileAll(ctx context.Context) error
}

// ServiceProvider is the "services" capability: the extension describes
// per-user processes that the host runs on its behalf (see
// [Host.ConnectService]).
type ServiceProvider interface {
	// StartService returns how to start service name for user, or nil when
	// that user has none.
	StartService(ctx context.Context, name, user string) (*ProcessSpec, error)
}

// StatusReporter is the "status" capability: a per-user, per-resource view
// for status pages and the CLI.
type StatusReporter interface {
	// Status reports on user, or on every user the extension knows when
	// user is empty.
	Status(ctx context.Context, user string) ([]StatusEntry, error)
}

// Capability names a capability in a [Descriptor].
type Capability string

// The capabilities an extension may list.
const (
	CapabilityTools    Capability = "tools"
	CapabilityUsers    Capability = "users"
	CapabilityServices Capability = "services"
	CapabilityStatus   Capability = "status"
)

// Descriptor says what an extension is and what it offers.
type Descriptor struct {
	// Name is the extension's name, used in logs and as the default prefix
	// of its tool names.
	Name        string
	Version     string
	Description string
	// Capabilities lists the optional interfaces the extension implements.
	// Across the wire a type assertion means nothing: this list is what the
	// host trusts.
	Capabilities []Capability
	// Settings lists the settings sections the extension offers.
	Settings []SettingsSection
	// ProtocolVersion is filled in by the carrier.
	ProtocolVersion int
}

// Has reports whether d lists capability c.
func (d *Descriptor) Has(c Capability) bool {
	if d == nil {
		return false
	}
	for _, x := range d.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// SettingsSection is one settings section. Its form travels as JSON
// (descriptor v1, owned by the settings module), so ext depends on nothing
// else in this repository.
type SettingsSection struct {
	ID          string
	Title       string
	Description string
	// Scope is "user" or "system".
	Scope string
	// Form is the JSON form {"v":1,"root":{...}}.
	Form json.RawMessage
}

// ConfigureRequest is what the host hands an extension once per connection.
type ConfigureRequest struct {
	// Name is the name under which the operator declared the extension.
	Name string
	// Config is the extension's config block from the operator's file,
	// untouched; the extension validates it.
	Config json.RawMessage
	// Host is the host's services. It stays valid until Shutdown.
	Host Host
	// BaseDir is the folder of the operator's file: relative paths in
	// Config resolve against it. Empty for in-process extensions without a
	// file.
	BaseDir string
}

// CallToolRequest asks an extension to run one of its tools.
type CallToolRequest struct {
	// User is the acting user; empty when the call has no identifiable user.
	User string
	// Conversation identifies the conversation, when there is one.
	Conversation string
	// Name is the tool's full registered name.
	Name string
	// Arguments is the tool's input, a JSON object, carried raw.
	Arguments json.RawMessage
}

// CallToolResult is a tool's result. Content is a JSON array of MCP content
// blocks carried raw end to end; use [TextResult] or [ErrorResult] to build
// simple ones.
type CallToolResult struct {
	Content           json.RawMessage
	StructuredContent json.RawMessage
	IsError           bool
	// Details carries extension-specific raw JSON for the host's logs and
	// UIs; it is never shown to a model.
	Details json.RawMessage
}

// Exposure says how a tool is offered to a model.
type Exposure string

// The exposures.
const (
	// ExposureDirect tools are listed to the model (the default).
	ExposureDirect Exposure = "direct"
	// ExposureDeferred tools are offered only after a search finds them.
	ExposureDeferred Exposure = "deferred"
	// ExposureCodemode tools are callable only from code, never shown to
	// the model directly.
	ExposureCodemode Exposure = "codemode"
)

// Replay says whether a call may be re-run after a crash.
type Replay string

// The replay safeties.
const (
	// ReplayUnsafe calls are never re-run (the default: an external call
	// may have had effects).
	ReplayUnsafe Replay = "unsafe"
	// ReplaySafe calls may be re-run.
	ReplaySafe Replay = "safe"
)

// Tool is a tool registration.
type Tool struct {
	// Name is the full name, e.g. "github/create_issue".
	Name        string
	Title       string
	Description string
	// InputSchema is a JSON Schema object, raw.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Annotations are MCP tool annotations, raw.
	Annotations json.RawMessage
	// Exposure defaults to ExposureDirect when empty.
	Exposure Exposure
	// Replay defaults to ReplayUnsafe when empty.
	Replay Replay
}

// ProcessSpec describes a per-user process the host runs for an extension.
type ProcessSpec struct {
	Command string
	Args    []string
	// Env holds KEY=VALUE entries. The host adds a short allowlist (PATH,
	// HOME, LANG, TMPDIR) and never passes its own environment.
	Env []string
	// Dir is the working directory; empty means the user's data folder.
	Dir string
	// ReadablePaths lists paths the process needs to read (a hint for
	// sandboxes).
	ReadablePaths []string
	// OneSession marks a process that serves one handle in its whole life,
	// such as an MCP stdio server (one session per process). The host never
	// hands it to a second ConnectService and stops it as soon as that
	// handle is released, instead of keeping it idle for reuse.
	OneSession bool
}

// StatusEntry is one line of a status report.
type StatusEntry struct {
	User string
	// Name names the resource (for ext-mcp: a server).
	Name string
	// State is a short word such as "connected", "retiring", "quarantined".
	State string
	// Reason explains a bad state in words a user can act on.
	Reason string
	// NextRetry is when a quarantined resource is tried again.
	NextRetry time.Time
	Tools     int
	Detail    string
}
