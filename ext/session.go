package ext

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Session is the agent's client session behind a request, as an extension
// sees it while it handles that request ([CallToolRequest.Session] and the
// other requests that carry one). Through it an extension reports progress
// and log messages, and asks the client things: sampling, elicitation,
// roots.
//
// A Session is valid only until the request it came with returns; later
// calls fail with [ErrUnavailable]. Its methods may be called concurrently.
// Payloads are MCP JSON carried raw: the host relays them to the client
// without decoding them on the way.
type Session interface {
	// Capabilities returns the client's declared MCP capabilities (the
	// "capabilities" object of its initialize request), raw; "{}" when it
	// declared none.
	Capabilities() json.RawMessage
	// Notify sends a notification tied to the request:
	// [MethodProgress] (params {"progress":n,"total":n,"message":s}; the
	// host fills in the client's progress token and drops the
	// notification when the client asked for no progress) or
	// [MethodLogMessage] ({"level":..,"logger":..,"data":..}).
	Notify(ctx context.Context, method string, params json.RawMessage) error
	// Request asks the client and waits for the answer: [MethodCreateMessage],
	// [MethodElicit] or [MethodListRoots]. It returns an error wrapping
	// [ErrUnimplemented] when the client did not declare the capability,
	// and a [*RPCError] when the client answered with an error.
	Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

// The methods a [Session] relays.
const (
	// MethodProgress reports progress of the request.
	MethodProgress = "notifications/progress"
	// MethodLogMessage is a log message for the client.
	MethodLogMessage = "notifications/message"
	// MethodCreateMessage asks the client's model for a completion
	// (sampling).
	MethodCreateMessage = "sampling/createMessage"
	// MethodElicit asks the user for input, in a form or by opening a URL.
	MethodElicit = "elicitation/create"
	// MethodListRoots asks the client for its roots.
	MethodListRoots = "roots/list"
)

// The notifications an extension may send to all of a user's sessions
// with [Host.Notify].
const (
	// MethodResourceUpdated says a resource the user subscribed to
	// changed: params {"uri":...}.
	MethodResourceUpdated = "notifications/resources/updated"
	// MethodRootsChanged is what the host tells extensions when a client
	// reports that its roots changed ([SessionListener]).
	MethodRootsChanged = "notifications/roots/list_changed"
	// MethodElicitationComplete says the out-of-band interaction of a URL
	// elicitation ended (MCP 2025-11-25): params {"elicitationId":...}.
	// The host hands it only to the user's sessions that declared URL
	// elicitation ([URLElicitation]).
	MethodElicitationComplete = "notifications/elicitation/complete"
)

// URLElicitation reports whether the raw capabilities object caps
// declares URL-mode elicitation ({"elicitation":{"url":{}}}).
func URLElicitation(caps json.RawMessage) bool {
	var c struct {
		Elicitation *struct {
			URL json.RawMessage `json:"url"`
		} `json:"elicitation"`
	}
	return json.Unmarshal(caps, &c) == nil && c.Elicitation != nil && len(c.Elicitation.URL) > 0 && string(c.Elicitation.URL) != "null"
}

// SessionCapability returns the capability a session method needs
// ("sampling", "elicitation", "roots"), or "" for methods that need none.
func SessionCapability(method string) string {
	switch method {
	case MethodCreateMessage:
		return "sampling"
	case MethodElicit:
		return "elicitation"
	case MethodListRoots:
		return "roots"
	}
	return ""
}

// HasCapability reports whether the raw capabilities object caps declares
// the top-level capability name (e.g. "sampling").
func HasCapability(caps json.RawMessage, name string) bool {
	if name == "" {
		return true
	}
	if len(caps) == 0 {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(caps, &m) != nil {
		return false
	}
	v, ok := m[name]
	return ok && string(v) != "null"
}

// RPCError is a JSON-RPC error a client (or an MCP server) answered with.
// It crosses the wire whole, so an extension can pass a client's refusal
// on to the server that asked; one that an extension's call returns
// (or wraps) crosses whole too, for the host to answer its client with.
type RPCError struct {
	Code    int64
	Message string
	Data    json.RawMessage
}

// CodeURLElicitationRequired is the JSON-RPC error code of MCP
// 2025-11-25's URLElicitationRequiredError: the request needs the user to
// open the URLs of the error's data ({"elicitations":[{"mode":"url",
// "elicitationId":…,"url":…,"message":…}]}) first.
const CodeURLElicitationRequired = -32042

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s (code %d)", e.Message, e.Code)
}

// NoSession is the session of a request that has no client behind it (the
// Go API, the CLI): it declares no capabilities, drops notifications and
// refuses requests with [ErrUnimplemented].
var NoSession Session = noSession{}

type noSession struct{}

func (noSession) Capabilities() json.RawMessage { return json.RawMessage("{}") }
func (noSession) Notify(context.Context, string, json.RawMessage) error {
	return nil
}
func (noSession) Request(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
	return nil, fmt.Errorf("the request has no client to ask %s: %w", method, ErrUnimplemented)
}

// SessionOf returns s, or [NoSession] when s is nil.
func SessionOf(s Session) Session {
	if s == nil {
		return NoSession
	}
	return s
}

// Progress reports progress of a request through s: progress so far, the
// total when known (0 for unknown), and an optional message.
func Progress(ctx context.Context, s Session, progress, total float64, message string) error {
	p := struct {
		Progress float64 `json:"progress"`
		Total    float64 `json:"total,omitempty"`
		Message  string  `json:"message,omitempty"`
	}{progress, total, message}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding progress: %w", err)
	}
	return SessionOf(s).Notify(ctx, MethodProgress, b)
}

// errSessionEnded is returned by a session used after its request ended.
var errSessionEnded = errors.New("the request this session belongs to has ended")
