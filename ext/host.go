package ext

import (
	"context"
	"encoding/json"
	"io"
	"os"
)

// Host is what the host offers every extension. All methods may be called
// concurrently. The user ID always travels as an argument, never inside the
// context.
type Host interface {
	// SetUserTools replaces the whole list of the user's tools from this
	// extension (an atomic replace; nil clears it).
	SetUserTools(ctx context.Context, user string, tools []Tool) error
	// SetSystemTools replaces the whole list of tools this extension offers
	// every user.
	SetSystemTools(ctx context.Context, tools []Tool) error
	// SetUserCatalog replaces everything this extension offers the user:
	// tools, prompts, resources, resource templates and instructions (an
	// atomic replace of every kind; a nil catalog clears them all).
	// SetUserTools is SetUserCatalog for tools alone.
	SetUserCatalog(ctx context.Context, user string, c *Catalog) error
	// Notify sends a notification to every open client session of the user
	// that wants it: [MethodLogMessage] (params as MCP defines them; the
	// host filters by each session's log level), [MethodResourceUpdated]
	// (to the sessions subscribed to that URI) or
	// [MethodElicitationComplete] (to the sessions that declared URL
	// elicitation).
	Notify(ctx context.Context, user, method string, params json.RawMessage) error
	// RequestUser asks the user's most recently active client session
	// that declared the capability, outside any request: for instance
	// [MethodListRoots] when a server asks for roots. It fails with
	// [ErrUnavailable] when the user has no such session.
	RequestUser(ctx context.Context, user, method string, params json.RawMessage) (json.RawMessage, error)
	// ConnectService returns a handle to the user's running process of
	// service name, starting it from [ServiceProvider.StartService] when
	// none runs. It returns [ErrNotFound] when the extension has no such
	// service for that user.
	ConnectService(ctx context.Context, name, user string) (ServiceConn, error)
	// ConnectServiceSpec is ConnectService with the spec the extension
	// already built (for instance from a credential it has just read):
	// when no process of service name runs for user, the host starts spec
	// without asking [ServiceProvider.StartService] for it, one round trip
	// instead of two. The extension must list the services capability.
	// A nil spec is [ErrInvalidArgument].
	ConnectServiceSpec(ctx context.Context, name, user string, spec *ProcessSpec) (ServiceConn, error)
	// UserStore returns the user's store, scoped to this extension.
	UserStore(user string) UserStore
	// ActingUser returns the user behind a conversation, or [ErrNotFound].
	ActingUser(ctx context.Context, conversation string) (string, error)
}

// ServiceConn is a handle to a running service process.
//
// Stdin and Stdout are the process's pipes: reads and writes go straight to
// the process (passed descriptors where the platform allows, else a byte
// stream). Release gives the handle back; the host stops the process when
// the last handle is released and the idle time has passed. Release is
// idempotent; after it Stdin and Stdout fail.
type ServiceConn interface {
	Stdin() io.WriteCloser
	Stdout() io.ReadCloser
	// PID is the process ID, or 0 when unknown.
	PID() int
	Release() error
}

// FileServiceConn is implemented by service handles whose pipes are real
// descriptors; the wire carrier passes them to the extension process
// instead of relaying bytes.
type FileServiceConn interface {
	ServiceConn
	// Files returns the process's stdin (write end) and stdout (read end).
	Files() (stdin, stdout *os.File)
}

// UserStore is one user's storage, scoped to one extension.
type UserStore interface {
	Secrets() Secrets
	Settings() Settings
	// Paths returns the user's folders for this extension, creating them.
	Paths(ctx context.Context) (Paths, error)
}

// Secrets holds a user's secrets. Values are never logged.
type Secrets interface {
	// Get returns the secret, or [ErrNotFound].
	Get(ctx context.Context, name string) (string, error)
	Set(ctx context.Context, name, value string) error
	// Delete removes the secret; deleting a missing one is not an error.
	Delete(ctx context.Context, name string) error
	// List returns the names of the user's secrets, sorted.
	List(ctx context.Context) ([]string, error)
}

// Settings holds a user's settings values, one JSON object per section.
type Settings interface {
	// Get returns the section's values as a JSON object ({} when none).
	Get(ctx context.Context, section string) (json.RawMessage, error)
	// Set replaces the section's values; the host validates them against
	// the section's form and refuses bad ones with [ErrInvalidArgument].
	Set(ctx context.Context, section string, values json.RawMessage) error
}

// Paths are a user's folders for one extension.
type Paths struct {
	Data  string
	State string
	Cache string
}
