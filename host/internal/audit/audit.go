package audit

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// Kinds of record.
const (
	KindTool     = "tool"     // a tool call
	KindPrompt   = "prompt"   // a prompt get
	KindResource = "resource" // a resource read
	KindToken    = "token"    // a token issued or revoked
	KindSignIn   = "signin"   // a sign-in
	KindSettings = "settings" // a settings or secret change (never the value)
	KindApproval = "approval" // a call's approval asked, given or refused (tool policy)
	KindReload   = "reload"   // the operator's file reloaded (or a reload refused)
	KindAction   = "action"   // an extension's action asked for (a runner's run now)
	// KindExtension: what an extension did as a user (a token minted for
	// a user's agent, revoked with the extension's word on why).
	KindExtension = "extension"
)

// Outcomes of a record.
const (
	OutcomeOK        = "ok"         // the call ran and succeeded
	OutcomeToolError = "tool_error" // the tool ran and reported an error (isError)
	OutcomeRefused   = "refused"    // the host refused it (Reason says why)
	OutcomeError     = "error"      // the call failed (Reason says how)
)

// ErrClosed is returned by a Store or Writer used after Close.
var ErrClosed = errors.New("audit: closed")

// Record is one entry of the audit log. It never holds a secret.
type Record struct {
	ID   int64     `json:"id,omitempty"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	User string    `json:"user"`
	// Credential names what the caller authenticated with: "token:<id>",
	// "oauth:<client id>", "session", "cli" or "api" — never a value.
	Credential string `json:"credential,omitempty"`
	Session    string `json:"session,omitempty"`
	Server     string `json:"server,omitempty"`
	// Tool is the tool's (or prompt's) full name, or the resource's URI.
	Tool string `json:"tool,omitempty"`
	// ToolHash is the SHA-256 (hex) of the definition of the tool that
	// ran ([ToolHash]).
	ToolHash string        `json:"toolHash,omitempty"`
	Duration time.Duration `json:"durationNs"`
	Outcome  string        `json:"outcome"`
	Reason   string        `json:"reason,omitempty"`
	ReqBytes int64         `json:"requestBytes"`
	ResBytes int64         `json:"resultBytes"`
	// Arguments and Result are kept only when the operator turns bodies
	// on, capped in size.
	Arguments string `json:"arguments,omitempty"`
	Result    string `json:"result,omitempty"`
}

// Filter selects records. Zero fields match everything.
type Filter struct {
	User, Server, Tool, Outcome, Kind string
	Since                             time.Time
	// AfterID returns records with a larger ID only (--follow).
	AfterID int64
	// Limit caps the records returned, the newest kept (0: 1000).
	Limit int
}

// Store keeps records. Implementations are safe for concurrent use.
type Store interface {
	// Append writes records in one transaction.
	Append(ctx context.Context, recs []Record) error
	// Query returns the records f selects, oldest first.
	Query(ctx context.Context, f Filter) ([]Record, error)
	// Sweep deletes the records older than before, then the oldest
	// beyond maxRows (0: no cap), returning how many it deleted.
	Sweep(ctx context.Context, before time.Time, maxRows int64) (int64, error)
	Close() error
}

// ToolHash returns the SHA-256 (hex) of a tool's definition: the pin hash
// ([pins.Hash]: name, title, description, input and output schemas and
// annotations as canonical JSON, object keys sorted), so that a record's
// toolHash is the hash `agenthost pins` shows for the same definition.
func ToolHash(name, title, description string, inputSchema, outputSchema, annotations json.RawMessage) string {
	return pins.Hash(ext.Tool{Name: name, Title: title, Description: description,
		InputSchema: inputSchema, OutputSchema: outputSchema, Annotations: annotations})
}

// Cap returns s cut to at most n bytes (with a marker when cut).
func Cap(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	return s[:n] + "…[truncated]"
}

// HashCache memoizes [ToolHash] per definition: the registry keeps each
// tool's schemas in the same byte slices until the tool changes, so their
// addresses (with the strings) identify a definition. Bounded: it starts
// over past 4096 entries. Safe for concurrent use.
type HashCache struct {
	mu sync.Mutex
	m  map[hashKey]string
}

type hashKey struct {
	name, title, description string
	in, out, ann             *byte
	lin, lout, lann          int
}

// Hash returns ToolHash of the definition, computed once per definition.
func (c *HashCache) Hash(name, title, description string, inputSchema, outputSchema, annotations json.RawMessage) string {
	k := hashKey{name, title, description, unsafe.SliceData(inputSchema), unsafe.SliceData(outputSchema), unsafe.SliceData(annotations),
		len(inputSchema), len(outputSchema), len(annotations)}
	c.mu.Lock()
	h, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return h
	}
	h = ToolHash(name, title, description, inputSchema, outputSchema, annotations)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 4096 {
		c.m = map[hashKey]string{}
	}
	c.m[k] = h
	c.mu.Unlock()
	return h
}
