package ext

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
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
// is [ErrNotFound]). An error that is (or wraps) an [*RPCError] with code
// [CodeURLElicitationRequired] asks the client to open the URLs in its
// data first: the host answers the client's tools/call with that JSON-RPC
// error as it is, where it answers other errors with an isError result.
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

// PromptProvider is the "prompts" capability: the extension renders
// prompts it published with [Host.SetUserCatalog]. GetPrompt is called
// concurrently; it returns an MCP GetPromptResult, raw, or [ErrNotFound]
// for a prompt it does not know.
type PromptProvider interface {
	GetPrompt(ctx context.Context, req *GetPromptRequest) (json.RawMessage, error)
}

// ResourceProvider is the "resources" capability: the extension reads the
// resources (and resource templates) it published with
// [Host.SetUserCatalog], and follows subscriptions to them.
type ResourceProvider interface {
	// ReadResource returns an MCP ReadResourceResult, raw, or
	// [ErrNotFound] for a URI it does not serve.
	ReadResource(ctx context.Context, req *ReadResourceRequest) (json.RawMessage, error)
	// SubscribeResource starts (or, with Unsubscribe set, stops) updates
	// of one resource for a user; updates arrive as [Host.Notify] with
	// [MethodResourceUpdated].
	SubscribeResource(ctx context.Context, req *SubscribeRequest) error
}

// Completer is the "completions" capability: argument completions for the
// extension's prompts and resource templates.
type Completer interface {
	// Complete answers an MCP completion/complete request (params raw, with
	// the prompt name or template URI the extension published) with an MCP
	// CompleteResult, raw.
	Complete(ctx context.Context, req *CompleteRequest) (json.RawMessage, error)
}

// TaskHandler is the "tasks" capability: the extension runs MCP tasks,
// created by task-augmented tool calls ([CallToolRequest.Task]), and
// answers tasks/get, tasks/result, tasks/cancel and tasks/list for them.
type TaskHandler interface {
	// HandleTask answers one tasks/* request (req.Method) with the MCP
	// result, raw. Task IDs are the ones the extension put in its
	// CreateTaskResult; [ErrNotFound] for an ID it does not know.
	HandleTask(ctx context.Context, req *TaskRequest) (json.RawMessage, error)
}

// SessionListener is the "sessions" capability: the extension hears
// notifications that a user's clients send, such as
// [MethodRootsChanged].
type SessionListener interface {
	SessionNotify(ctx context.Context, user, method string, params json.RawMessage) error
}

// SettingsValidator is the "validate" capability: the extension checks a
// user's values of one of its settings sections before the host stores
// them, for rules that the form cannot state because they depend on the
// user (ext-mcp: a shared server the operator lends to some users only).
// The host calls it for a user's own writes (a settings page, the API,
// the CLI), whether or not the user is active, with values the form
// accepted; an error refuses the write and nothing is stored. It must be
// fast and have no side effects; it is called concurrently.
type SettingsValidator interface {
	// ValidateSettings returns nil for values it accepts, or an error
	// wrapping [ErrInvalidArgument] that says why in words for the user.
	ValidateSettings(ctx context.Context, req *ValidateSettingsRequest) error
}

// Reconfigurer is the "reconfigure" capability: the extension takes a new
// config block in place when the operator reloads the host's file
// (`agenthost reload`, SIGHUP), without a restart and without
// interrupting what its old config still allows. The host first calls it
// with DryRun on every extension whose block changed, and only when all
// accept, again without DryRun; an extension without the capability is
// restarted with its new block instead.
type Reconfigurer interface {
	// Reconfigure checks req.Config as Configure would (an error names
	// the bad field and wraps [ErrInvalidArgument]); without DryRun it
	// then applies it. It is never called before Configure, and never
	// twice at once.
	Reconfigure(ctx context.Context, req *ReconfigureRequest) error
}

// ReconfigureRequest is a new config block for a [Reconfigurer].
type ReconfigureRequest struct {
	// Config is the extension's new config block, untouched; relative
	// paths resolve against [ConfigureRequest.BaseDir], as before.
	Config json.RawMessage
	// DryRun asks for the check only: nothing changes.
	DryRun bool
}

// ActionRunner is the "actions" capability: the extension does what its
// status entries offer ([StatusEntry.Actions]), such as starting a
// runner now. The host routes a surface's request (the JSON API, the
// CLI, a settings page's button) to it after checking who asks: a user
// may ask for an action of an entry of their own, the operator of any
// entry; and only for an action the entry lists at that moment. RunAction
// is called concurrently.
type ActionRunner interface {
	// RunAction does req.Action on the entry (req.User, req.Name) and says
	// what happened in words for the caller; [ErrNotFound] for an entry or
	// action it does not know.
	RunAction(ctx context.Context, req *ActionRequest) (string, error)
}

// ActionRequest asks an [ActionRunner] for one action on a status entry.
type ActionRequest struct {
	// Caller is who asks: the entry's user, or [OperatorUser].
	Caller string
	// User and Name are the entry's.
	User, Name string
	Action     string
}

// ValidateSettingsRequest asks a [SettingsValidator] about a user's values.
type ValidateSettingsRequest struct {
	User    string
	Section string
	// Values are the section's values as the form accepted them
	// (normalized JSON); secret fields are never among them.
	Values json.RawMessage
}

// Authorizer is the "auth" capability: the extension signs a user, or the
// operator ([OperatorUser]), in to a resource it connects to (for ext-mcp:
// an OAuth-protected remote MCP server) with an OAuth authorization code
// flow that the host carries to a browser and back. The host serves the
// redirect URI (<PublicURL>/oauth/callback) and the client ID metadata
// document (<PublicURL>/oauth/client-metadata.json), keeps each pending
// flow (its state, extension, user and expiry; used once) and hands the
// authorization server's redirect to the extension that started it. The
// extension does the OAuth work (discovery, registration, PKCE, the token
// exchange) and keeps the grant in the user's [Secrets].
//
// Both methods are called concurrently, for the same user and for
// different users.
type Authorizer interface {
	// BeginAuth starts signing req.User in to resource req.Name and
	// returns the URL to open in a browser and the flow's OAuth state, by
	// which the host routes the redirect back. It fails with
	// [ErrNotFound] for a resource the user does not have,
	// [ErrInvalidArgument] for one that needs no sign-in, and
	// [ErrUnavailable] when the authorization server cannot be reached.
	BeginAuth(ctx context.Context, req *BeginAuthRequest) (*BeginAuthResult, error)
	// CompleteAuth finishes the flow of req.State with the authorization
	// server's redirect and says what to tell the person. An error says
	// why the sign-in failed, in words for that person (never with a
	// secret); a state the extension does not know, or no longer, is
	// [ErrInvalidArgument]. The host calls it at most once per state.
	CompleteAuth(ctx context.Context, req *CompleteAuthRequest) (*CompleteAuthResult, error)
}

// BeginAuthRequest asks an [Authorizer] to start a sign-in.
type BeginAuthRequest struct {
	// User is who signs in: a user, or [OperatorUser] for the operator's
	// credential of a shared resource.
	User string
	// Name names the resource (for ext-mcp: a server).
	Name string
	// RedirectURL is where the authorization server sends the browser
	// back: the host's callback, <PublicURL>/oauth/callback.
	RedirectURL string
	// ClientMetadataURL is the URL of the host's OAuth client ID metadata
	// document (<PublicURL>/oauth/client-metadata.json), which
	// authorization servers that accept URL client IDs fetch; empty when
	// the host cannot offer one (its public URL is not https).
	ClientMetadataURL string
}

// BeginAuthResult is a started sign-in.
type BeginAuthResult struct {
	// URL is the authorization URL the person opens (http or https).
	URL string
	// State is the flow's OAuth state parameter, as it appears in URL.
	State string
	// Expires is when the extension stops waiting for the redirect; zero
	// leaves it to the host's default.
	Expires time.Time
}

// CompleteAuthRequest hands an [Authorizer] the authorization server's
// redirect of a flow it started.
type CompleteAuthRequest struct {
	// User and Name are the flow's, as the host recorded them at
	// BeginAuth.
	User string
	Name string
	// State is the flow's state.
	State string
	// Query is the redirect's raw query string, untouched: code, state
	// and iss, or error and error_description. It holds the authorization
	// code: never log it.
	Query string
}

// CompleteAuthResult is a finished sign-in.
type CompleteAuthResult struct {
	// Message tells the person what happened, such as "Connected to
	// notion.".
	Message string
}

// OperatorUser is the reserved user ID under which extensions keep the
// operator's own credentials (a shared resource's): the host maps its
// operator scope (the CLI's --operator) to it, and never lets a user act
// under it.
const OperatorUser = "@operator"

// StateNeedsSignIn is the [StatusEntry.State] of a resource the user must
// sign in to (again) before it can be used: no grant yet, or one that was
// revoked or expired for good. Its Reason says how (a link from
// [SignInURL], a command); the host's surfaces offer to start the
// extension's [Authorizer.BeginAuth] for it.
const StateNeedsSignIn = "needs sign-in"

// SignInURL returns the address of the host's page where a person starts
// signing in to resource name of extension extName (publicURL being
// [ConfigureRequest.PublicURL]): it offers a Connect button that begins
// the flow. Extensions put it in the Reason of a [StateNeedsSignIn] entry
// and in the errors their tools return.
func SignInURL(publicURL, extName, name string) string {
	return strings.TrimRight(publicURL, "/") + "/settings/connect/" + url.PathEscape(extName) + "/" + url.PathEscape(name)
}

// Capability names a capability in a [Descriptor].
type Capability string

// The capabilities an extension may list.
const (
	CapabilityTools       Capability = "tools"
	CapabilityUsers       Capability = "users"
	CapabilityServices    Capability = "services"
	CapabilityStatus      Capability = "status"
	CapabilityPrompts     Capability = "prompts"
	CapabilityResources   Capability = "resources"
	CapabilityCompletions Capability = "completions"
	CapabilityTasks       Capability = "tasks"
	CapabilitySessions    Capability = "sessions"
	CapabilityAuth        Capability = "auth"
	// CapabilityValidate is [SettingsValidator]; an extension without it
	// gets its users' values as its forms accept them.
	CapabilityValidate Capability = "validate"
	// CapabilityReconfigure is [Reconfigurer]; an extension without it
	// is restarted when its config block changes on a reload.
	CapabilityReconfigure Capability = "reconfigure"
	// CapabilitySandbox is not an interface: it says the extension starts
	// untrusted service processes ([ProcessSpec.Sandbox]). A host that
	// cannot contain them refuses to start the extension, naming why,
	// unless its operator accepted the risk.
	CapabilitySandbox Capability = "sandbox"
	// CapabilityActions is [ActionRunner].
	CapabilityActions Capability = "actions"
	// CapabilityUserTools is [UserToolsWatcher].
	CapabilityUserTools Capability = "usertools"
	// CapabilitySnapshot is not an interface: it asks the host to hand
	// [UserLifecycle.Activate] the user's settings and secrets for the
	// extension ([ActivationSnapshot]), so that activating needs no
	// callback for them. A host that predates it hands none: the
	// extension then reads them through [Host.UserStore], as before.
	CapabilitySnapshot Capability = "snapshot"
	// CapabilityCallerTools is not an interface: it says the extension
	// calls tools as the caller of its own tool calls ([CallerTools]), so
	// the host gives each of its calls a caller handle
	// ([CallToolRequest.Caller]); an extension without it gets none (the
	// handle costs the host a registration per call).
	CapabilityCallerTools Capability = "callertools"
)

// UserToolsWatcher is implemented by an extension with the "usertools"
// capability: the host tells it each active user's tools (every exposure,
// the other extensions' only) when they change, and once when the user is
// activated, so that it can offer a tool built on them (code mode's
// code/run, with their declarations). It learns what the tools are, never
// their use; calling them takes [CallerTools]. Calls for one user come in
// order; calls for different users may be concurrent.
type UserToolsWatcher interface {
	UserToolsChanged(ctx context.Context, user string, tools []Tool) error
}

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
	// PublicURL is the URL people reach the host's HTTP surfaces at (the
	// operator's publicURL, else its listen address), without a trailing
	// slash: for links an extension shows (a settings page, a sign-in) and
	// redirect URIs. Empty when the host serves nothing.
	PublicURL string
	// ListenAddr is the address (host:port) the host's HTTP surfaces
	// listen on, so that an extension can refuse to connect back to the
	// host itself (a user-supplied URL that points at the host's own
	// endpoint would loop). Empty when unknown.
	ListenAddr string
}

// CallToolRequest asks an extension to run one of its tools.
type CallToolRequest struct {
	// User is the acting user; empty when the call has no identifiable user.
	User string
	// Conversation identifies the conversation, when there is one.
	Conversation string
	// Name is the tool's full registered name.
	Name string
	// Params, when set, are the client's tools/call params, raw, as its
	// MCP client sent them ({"name":…,"arguments":…,"_meta":…,"task":…};
	// the name as the client spelled it), with the host's one edit: its
	// trace context in _meta. Nil when the call came another way (the Go
	// API, the CLI, another extension) or the host dropped the task. A
	// pass-through sends them on with its own edit
	// ([github.com/agenthost/agenthost/ext/mcpwire.EditCall])
	// instead of rebuilding them; the fields below are read from them
	// (the host sets both, the out-of-process carrier sends Params alone
	// and reads the fields from them on the extension's side).
	Params json.RawMessage
	// Arguments is the tool's input, a JSON object, carried raw.
	Arguments json.RawMessage
	// ProgressToken is the client's progress token for this call, raw, or
	// nil when the client asked for no progress. Report progress with
	// [Progress] on Session; the host sends it under this token.
	ProgressToken json.RawMessage
	// Meta is the client's _meta object for the call, raw, as it came
	// (its progressToken too, which ProgressToken holds already); nil
	// when there was none.
	Meta json.RawMessage
	// Task, when set, asks for a task-augmented call (MCP tasks): the raw
	// "task" parameters, e.g. {"ttl":60000}. An extension with the "tasks"
	// capability then answers with an MCP CreateTaskResult in
	// [CallToolResult.Raw]; one without it runs the call normally.
	Task json.RawMessage
	// Session is the calling client's session; nil means none (treat it as
	// [NoSession], e.g. with [SessionOf]).
	Session Session
	// Scope is the caller's scope (a scoped token's), nil for an
	// unscoped caller. An extension that calls further tools for this
	// caller ([UserActor.CallToolAs]) passes it on, so that the caller is
	// never widened.
	Scope *Scope
	// Credential and SessionID name, for the host's audit log, what the
	// caller authenticated with ("token:<id>", "oauth:<grant id>"; empty:
	// the Go API or the CLI) and the client's MCP session. Never a
	// secret. The host's surfaces set them; an extension never sees them
	// (the host clears them before the call reaches it).
	Credential, SessionID string
	// Caller is the opaque handle of this call's caller, valid while the
	// call runs: an extension calls further tools as this caller, never
	// wider, with [CallerTools] (no operator grant needed). Set only for
	// an extension that lists [CapabilityCallerTools]; empty when the host
	// offers none (an older host, a test).
	Caller string
}

// CallToolResult is a tool's result. Content is a JSON array of MCP content
// blocks carried raw end to end; use [TextResult] or [ErrorResult] to build
// simple ones.
//
// Raw, when set, is the whole MCP result object as bytes
// ({"content":[...],"structuredContent":...,"isError":...}, or a
// CreateTaskResult for a task-augmented call), and wins over Content and
// StructuredContent, which then stay empty; IsError mirrors the object's
// isError ([RawResult] sets both). A pass-through extension sets Raw so
// that no hop decodes the result, and the out-of-process carrier always
// delivers results this way. Read results with [CallToolResult.JSON] and
// [CallToolResult.Fields], which handle both forms.
type CallToolResult struct {
	Content           json.RawMessage
	StructuredContent json.RawMessage
	IsError           bool
	// Details carries extension-specific raw JSON for the host's logs and
	// UIs; it is never shown to a model.
	Details json.RawMessage
	// Raw is the whole MCP result object, raw (see above).
	Raw json.RawMessage
}

// GetPromptRequest asks an extension to render one of its prompts.
type GetPromptRequest struct {
	User         string
	Conversation string
	// Name is the prompt's full published name.
	Name string
	// Arguments is the prompt's arguments, a JSON object of strings, raw.
	Arguments json.RawMessage
	// Session is the calling client's session (nil: none).
	Session Session
}

// ReadResourceRequest asks an extension to read one resource.
type ReadResourceRequest struct {
	User         string
	Conversation string
	// URI is the resource's URI, as the extension published it (or one
	// that matches one of its templates).
	URI string
	// Session is the calling client's session (nil: none).
	Session Session
}

// SubscribeRequest starts or stops updates of one resource for a user.
type SubscribeRequest struct {
	User        string
	URI         string
	Unsubscribe bool
}

// CompleteRequest asks for argument completions.
type CompleteRequest struct {
	User string
	// Params is the MCP completion/complete params, raw: {"ref":{...},
	// "argument":{...},"context":{...}}, with the extension's own prompt
	// name or template URI in ref.
	Params json.RawMessage
	// Session is the calling client's session (nil: none).
	Session Session
}

// TaskRequest is one tasks/* request for a user's task.
type TaskRequest struct {
	User string
	// Method is "tasks/get", "tasks/result", "tasks/cancel" or
	// "tasks/list".
	Method string
	// Params is the request's params, raw ({"taskId":...}, or a cursor).
	Params json.RawMessage
	// Session is the calling client's session (nil: none): tasks/result
	// may ask the client for input while it waits.
	Session Session
}

// The tasks/* methods ([TaskRequest.Method]).
const (
	MethodTaskGet    = "tasks/get"
	MethodTaskResult = "tasks/result"
	MethodTaskCancel = "tasks/cancel"
	MethodTaskList   = "tasks/list"
)

// Catalog is everything an extension offers one user beside settings, as
// [Host.SetUserCatalog] publishes it: an atomic replace of every kind.
type Catalog struct {
	Tools             []Tool
	Prompts           []Prompt
	Resources         []Resource
	ResourceTemplates []ResourceTemplate
	// Instructions are usage notes for models, one per source (for
	// ext-mcp: per server); the host merges them into what its clients see
	// at initialize.
	Instructions []Instruction
}

// Prompt is a prompt registration. Its MCP definition travels raw; the
// host reads only the name.
type Prompt struct {
	// Name is the full name, e.g. "github/summarize_pr".
	Name string
	// Definition is the MCP Prompt object (title, description, arguments,
	// icons, _meta), raw, with the server's own name inside; the host
	// replaces the name it shows clients.
	Definition json.RawMessage
}

// Resource is a resource registration. URIs are kept as their source gives
// them; the host routes reads by URI.
type Resource struct {
	URI string
	// Definition is the MCP Resource object, raw.
	Definition json.RawMessage
	// Server names the server the resource comes from (ext-mcp: the MCP
	// server), so that a [Scope] naming that server reaches it. Empty:
	// no scoped token sees it (so too for an older extension, which sends
	// no server).
	Server string
}

// ResourceTemplate is a resource template registration (RFC 6570 URI
// template). Reads of URIs that are not published resources go to the
// extensions whose templates match.
type ResourceTemplate struct {
	URITemplate string
	// Definition is the MCP ResourceTemplate object, raw.
	Definition json.RawMessage
	// Server is as [Resource.Server].
	Server string
}

// Instruction is one source's usage note for models.
type Instruction struct {
	// Source names where it comes from (for ext-mcp: the server).
	Source string
	Text   string
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

// PinMode says how the host pins a tool's definition (README "Tool
// pinning"): the first definition seen is the baseline, and a changed or
// new one is held for approval.
type PinMode string

// The pin modes.
const (
	// PinOff (or empty) does not pin the tool.
	PinOff PinMode = "off"
	// PinWarn lets a changed or new tool work and flags it (status, the
	// settings page, a log line) until approved.
	PinWarn PinMode = "warn"
	// PinBlock neither lists nor runs a changed or new tool until it is
	// approved.
	PinBlock PinMode = "block"
)

// Tool is a tool registration. Its JSON form (the field tags) is the one
// every surface of the host shows: MCP's tool fields plus exposure and
// replay.
type Tool struct {
	// Name is the full name, e.g. "github/create_issue".
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// InputSchema is a JSON Schema object, raw.
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Annotations are MCP tool annotations, raw.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// Execution is the MCP tool's execution properties, raw (e.g.
	// {"taskSupport":"optional"} for tools that run as tasks).
	Execution json.RawMessage `json:"execution,omitempty"`
	// Icons is the MCP tool's icons array, raw.
	Icons json.RawMessage `json:"icons,omitempty"`
	// Meta is the MCP tool's _meta object, raw.
	Meta json.RawMessage `json:"_meta,omitempty"`
	// Exposure defaults to ExposureDirect when empty.
	Exposure Exposure `json:"exposure,omitempty"`
	// Replay defaults to ReplayUnsafe when empty.
	Replay Replay `json:"replay,omitempty"`
	// Pin is how the host pins the tool's definition (empty: not at
	// all). A tool's server is the part of its name before the first
	// "/"; the host keeps a baseline per user and server.
	Pin PinMode `json:"pin,omitempty"`
	// PinByOperator says the operator approves the tool's changes (a
	// server the operator runs), once for every user who saw the same
	// change; otherwise each user approves their own.
	PinByOperator bool `json:"pinByOperator,omitempty"`
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
	// ReadablePaths lists paths the process needs to read. A sandboxed
	// process sees them read-only, beside the system folders and its
	// user's folder; others it does not see.
	ReadablePaths []string
	// OneSession marks a process that serves one handle in its whole life,
	// such as an MCP stdio server (one session per process). The host never
	// hands it to a second ConnectService and stops it as soon as that
	// handle is released, instead of keeping it idle for reuse.
	OneSession bool
	// Sandbox marks an untrusted process (a program a user supplied, say):
	// the host contains it — on Linux its own uid per user where the host
	// runs as root, else a user namespace; a private pid namespace; no view
	// of the host's data folder beyond the user's own folder and
	// ReadablePaths — or refuses to start it when it cannot (unless its
	// operator accepted the risk). Extensions that set it list
	// [CapabilitySandbox].
	Sandbox bool
}

// StatusEntry is one line of a status report.
type StatusEntry struct {
	User string
	// Name names the resource (for ext-mcp: a server).
	Name string
	// State is a short word such as "connected", "retiring",
	// "quarantined", or [StateNeedsSignIn].
	State string
	// Reason explains a bad state in words a user can act on.
	Reason string
	// NextRetry is when a quarantined resource is tried again.
	NextRetry time.Time
	Tools     int
	Detail    string
	// Actions are what the entry's user (and the operator) may ask the
	// extension to do with it, by name, such as "run" (capability
	// "actions", [ActionRunner]); the host's surfaces offer them.
	Actions []string
}

// userGroupsKey is the context key of [WithUserGroups].
type userGroupsKey struct{}

// WithUserGroups returns ctx carrying the groups of the user being
// activated (or whose settings are validated). The host sets it on
// [UserLifecycle.Activate]'s and [SettingsValidator.ValidateSettings]'s
// context (it travels over the wire); an extension reads it with
// [UserGroups].
func WithUserGroups(ctx context.Context, groups []string) context.Context {
	return context.WithValue(ctx, userGroupsKey{}, slices.Clone(groups))
}

// UserGroups returns the groups of the user [UserLifecycle.Activate] is
// activating, or whose settings [SettingsValidator.ValidateSettings]
// checks: the identity provider's groups claim and the operator's
// (agenthost user set-groups). It is empty elsewhere, and from a host
// that predates groups: an extension must then lend a group nothing.
func UserGroups(ctx context.Context) []string {
	g, _ := ctx.Value(userGroupsKey{}).([]string)
	return slices.Clone(g)
}

// UserSnapshot is a user's settings and secrets for one extension, read
// by the host once, as it calls [UserLifecycle.Activate] of an extension
// that lists [CapabilitySnapshot]. It is what [Host.UserStore] would have
// answered at that moment; values written later are not in it.
type UserSnapshot struct {
	// Settings are the values of each of the extension's user sections,
	// by section ID ({} for a section never saved).
	Settings map[string]json.RawMessage
	// Secrets are the user's secrets for the extension, by name. Never
	// logged or shown.
	Secrets map[string]string
}

// Setting returns the values of section, as [Settings.Get] would, and
// whether the snapshot holds the section.
func (s *UserSnapshot) Setting(section string) (json.RawMessage, bool) {
	if s == nil {
		return nil, false
	}
	v, ok := s.Settings[section]
	return v, ok
}

// Secret returns the secret name as [Secrets.Get] would: [ErrNotFound]
// when the user has none of that name.
func (s *UserSnapshot) Secret(name string) (string, error) {
	if s != nil {
		if v, ok := s.Secrets[name]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("secret %q: %w", name, ErrNotFound)
}

// userSnapshotKey is the context key of [WithUserSnapshot].
type userSnapshotKey struct{}

// WithUserSnapshot returns ctx carrying the snapshot of the user being
// activated; nil hides one ctx carried. The host sets it on
// [UserLifecycle.Activate]'s context for an extension that lists
// [CapabilitySnapshot] (it travels over the wire); an extension reads it
// with [ActivationSnapshot].
func WithUserSnapshot(ctx context.Context, s *UserSnapshot) context.Context {
	return context.WithValue(ctx, userSnapshotKey{}, s)
}

// ActivationSnapshot returns the snapshot of the user
// [UserLifecycle.Activate] is activating, or nil: elsewhere, from a host
// that predates it, or for an extension that does not list
// [CapabilitySnapshot]. The extension must not change it.
func ActivationSnapshot(ctx context.Context) *UserSnapshot {
	s, _ := ctx.Value(userSnapshotKey{}).(*UserSnapshot)
	return s
}
