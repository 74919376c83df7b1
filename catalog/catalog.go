package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// The availabilities of a server.
const (
	// AvailabilityDefault servers are on for a user until the user
	// switches them off.
	AvailabilityDefault = "default"
	// AvailabilityOptIn servers are off until the user switches them on.
	AvailabilityOptIn = "opt-in"
)

// The credential kinds of a server.
const (
	// CredentialsUser servers use each user's own credential (the
	// default). A user without one connects unauthenticated.
	CredentialsUser = "user"
	// CredentialsShared servers lend the operator's credential to the
	// users on the server's allowlist.
	CredentialsShared = "shared"
)

// Hidden is the pseudo-exposure of a [ToolPolicy] that keeps a tool out of
// the catalog altogether: it is neither registered nor callable.
const Hidden ext.Exposure = "hidden"

// ServerDecl is one server a user may have, as declared in the operator's
// file or in the user's own server list. The engine treats it as a value:
// it never modifies a ServerDecl it was given.
type ServerDecl struct {
	// Name is the registered prefix of the server's tools: "notes", or
	// "u_notes" for a user's own server. It never contains "/".
	Name string
	// Remote is true for a server reached over HTTP (url), false for a
	// stdio server (command).
	Remote bool
	// Availability is AvailabilityDefault or AvailabilityOptIn; empty
	// means AvailabilityDefault.
	Availability string
	// Credentials is CredentialsUser or CredentialsShared; empty means
	// CredentialsUser.
	Credentials string
	// Enabled is false for a server the operator declared but switched
	// off.
	Enabled bool
	// Users is the allowlist of a shared server.
	Users []string
	// Fingerprint identifies the server's connection: its config and the
	// identity of the credential it uses. Two declarations with the same
	// Name and Fingerprint share a connection; a change means reconnect.
	Fingerprint string
	// Timeout is each call's idle limit: a call that hears nothing from
	// the server (no progress) for this long ends with an error result;
	// every progress notification starts the clock again. Zero means the
	// engine's default.
	Timeout time.Duration
	// MaxDuration bounds a call however much progress it reports; zero
	// means no bound beyond Timeout's.
	MaxDuration time.Duration
	// Tools says how each of the server's tools is exposed.
	Tools ToolPolicy
	// Pin is how the host pins the server's tools' definitions, and
	// PinByOperator whether the operator (rather than the user) approves
	// their changes; both are copied onto each registered tool.
	Pin           ext.PinMode
	PinByOperator bool
	// Spec is opaque to the engine and handed to the [Connector].
	Spec any
}

// Problem is a server left out of a user's active set, with the reason
// shown in the status.
type Problem struct {
	// Server names the server, or the part of the user's settings at
	// fault (such as a whole list of the user's own servers).
	Server string
	// Reason is a sentence a user can act on. It never holds a secret.
	Reason string
}

// Plan is a user's desired active set.
type Plan struct {
	// Servers are the servers the user should be connected to.
	Servers []ServerDecl
	// Problems are servers left out, each with its reason.
	Problems []Problem
}

// Planner computes a user's desired active set. Plan is called once per
// refresh, never concurrently for the same user, and concurrently for
// different users.
type Planner interface {
	Plan(ctx context.Context, user string) (Plan, error)
}

// PlannerFunc adapts a function to a [Planner].
type PlannerFunc func(ctx context.Context, user string) (Plan, error)

// Plan implements [Planner].
func (f PlannerFunc) Plan(ctx context.Context, user string) (Plan, error) { return f(ctx, user) }

// ToolInfo is one tool as a server lists it. Schemas and annotations stay
// raw JSON.
type ToolInfo struct {
	Name         string
	Title        string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Annotations  json.RawMessage
	// Execution, Icons and Meta are the tool's MCP execution properties,
	// icons and _meta, raw.
	Execution json.RawMessage
	Icons     json.RawMessage
	Meta      json.RawMessage
}

// Extras is what a server offers beside tools, as it lists it. Definitions
// stay raw MCP JSON.
type Extras struct {
	Prompts   []NamedInfo // by the server's prompt name
	Resources []NamedInfo // by URI
	Templates []NamedInfo // by URI template
	// Instructions are the server's instructions for models.
	Instructions string
}

// NamedInfo is one prompt, resource or resource template: its name (or URI,
// or URI template) and its MCP definition, raw.
type NamedInfo struct {
	Name       string
	Definition json.RawMessage
}

// Connector makes connections to servers.
//
// Connect is called concurrently, for the same user and for different
// users. ctx bounds the connecting only: the returned Conn lives until the
// engine closes it. onToolsChanged may be called at any time, from any
// goroutine, also before Connect returns and after Close; the engine
// coalesces the calls. A Connect that fails must release everything it
// started.
type Connector interface {
	Connect(ctx context.Context, user string, s ServerDecl, onToolsChanged func()) (Conn, error)
}

// Conn is one live connection of one user to one server.
//
// ListTools and CallTool are called concurrently. Close is called exactly
// once, after every call the engine started on it returned, except when
// the engine itself is being closed and its deadline has passed.
type Conn interface {
	// ListTools lists the server's tools, all pages.
	ListTools(ctx context.Context) ([]ToolInfo, error)
	// CallTool calls one tool: req.Name is the server's own tool name and
	// req.Session the calling client's (never nil). A tool that failed is
	// a result with IsError set; an error means the call broke (the
	// connection died, the server answered with a protocol error the Conn
	// did not map to a result, or ctx ended).
	CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error)
	// Done is closed when the connection ended, whether it died on its own
	// (a crash, EOF) or was closed.
	Done() <-chan struct{}
	// Err says why Done was closed; it is nil before that and after Close.
	// The text is shown to the user: it never holds a secret.
	Err() error
	// Close ends the connection and releases everything it holds.
	Close() error
}

// FeatureConn is a [Conn] whose server offers more than tools: prompts,
// resources, completions and tasks. Its methods are called concurrently,
// like CallTool; names, URIs and task IDs are the server's own.
type FeatureConn interface {
	Conn
	// ListExtras lists the server's prompts, resources and resource
	// templates (all pages) and returns its instructions. A server without
	// one of them lists none.
	ListExtras(ctx context.Context) (*Extras, error)
	// GetPrompt renders a prompt (req.Name is the server's name).
	GetPrompt(ctx context.Context, req *ext.GetPromptRequest) (json.RawMessage, error)
	// ReadResource reads a resource; [ext.ErrNotFound] when the server has
	// no such URI.
	ReadResource(ctx context.Context, req *ext.ReadResourceRequest) (json.RawMessage, error)
	// SubscribeResource starts or stops the server's updates of a URI.
	SubscribeResource(ctx context.Context, uri string, unsubscribe bool) error
	// Complete answers completion/complete (params with the server's own
	// prompt name or template).
	Complete(ctx context.Context, params json.RawMessage, sess ext.Session) (json.RawMessage, error)
	// Task answers a tasks/* request (task IDs are the server's own).
	Task(ctx context.Context, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error)
}

// Publisher publishes everything a user has in one call (an atomic
// replace); [ext.Host.SetUserCatalog] is one. Publish is never called
// concurrently for the same user.
type Publisher interface {
	Publish(ctx context.Context, user string, c *ext.Catalog) error
}

// PublisherFunc adapts a function, such as a bound
// ext.Host.SetUserCatalog, to a [Publisher].
type PublisherFunc func(ctx context.Context, user string, c *ext.Catalog) error

// Publish implements [Publisher].
func (f PublisherFunc) Publish(ctx context.Context, user string, c *ext.Catalog) error {
	return f(ctx, user, c)
}

// SignInError is what a [Connector] returns (alone or wrapped) for a server
// the user must sign in to before it can be used: there is no grant yet, or
// the one there was is revoked or expired for good. The engine does not
// quarantine the server with retries: it parks it in the state
// [ext.StateNeedsSignIn], with Reason shown in the status and in the error
// result of every call, and connects again only when the server's
// fingerprint changes (the planner sees a new credential, such as a fresh
// grant).
type SignInError struct {
	// Reason says what is missing and how to sign in (a link, a command),
	// in words the user can act on. It never holds a secret.
	Reason string
}

func (e *SignInError) Error() string { return e.Reason }

// OperatorOnlyError is what a [Connector] returns (alone or wrapped), or
// what a [Conn]'s Err is, when a failure has details only the operator may
// see: the output of a shared server's process, which holds the operator's
// credential. Its text (Error) is the user's reason; the engine shows
// Operator in the operator's status ([Engine.Status] of every user) only.
// Neither may hold a secret.
type OperatorOnlyError struct {
	// User is the reason every user sees (their status, their calls'
	// errors).
	User string
	// Operator is the reason with the details.
	Operator string
}

func (e *OperatorOnlyError) Error() string { return e.User }

// operatorReason returns reason with err's operator-only details, or ""
// when err has none. what is the step that failed (reason's prefix).
func operatorReason(what string, err error) string {
	var oe *OperatorOnlyError
	if !errors.As(err, &oe) {
		return ""
	}
	return what + oe.Operator
}
