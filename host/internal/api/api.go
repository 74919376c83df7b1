// Package api holds the types the host's surfaces (the MCP endpoint, the
// web UI and JSON API, the control socket of the CLI) share with package
// host. Package host's exported types are aliases of these, so the
// surfaces never import package host; each surface declares the small
// interface of the host it uses (mcpendpoint.Host, web.Host,
// control.Host), and *host.Host implements them all.
//
// The types are plain values: safe to copy and to share read-only between
// goroutines.
package api

import (
	"encoding/json"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// OperatorUser is the reserved user ID of the operator's own secrets.
const OperatorUser = ext.OperatorUser

// Tool is a registered tool and the extension that owns it. Its JSON form
// is the one every surface shows (the JSON API, the control socket, the
// CLI's --json): ext.Tool's fields, flat, plus "extension".
type Tool struct {
	ext.Tool
	// Extension names the owner.
	Extension string `json:"extension"`
}

// WithDefaults returns a registration with its defaults filled in, as the
// host's registry keeps it: exposure direct, replay unsafe, input schema
// {"type":"object"}.
func WithDefaults(t ext.Tool) ext.Tool {
	if t.Exposure == "" {
		t.Exposure = ext.ExposureDirect
	}
	if t.Replay == "" {
		t.Replay = ext.ReplayUnsafe
	}
	if len(t.InputSchema) == 0 {
		t.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	return t
}

// Section is one settings section of an extension, as a UI renders it.
type Section struct {
	Extension   string          `json:"extension"`
	ID          string          `json:"id"`
	Title       string          `json:"title"`
	Description string          `json:"description,omitempty"`
	Scope       string          `json:"scope"`
	Form        json.RawMessage `json:"form"`
}

// SettingsValues is a user's view of one section: the stored values and,
// for each secret field, whether it is set.
type SettingsValues struct {
	Values  json.RawMessage `json:"values"`
	Secrets map[string]bool `json:"secrets,omitempty"`
}

// StatusEntry is one line of an extension's status report.
type StatusEntry struct {
	Extension string    `json:"extension"`
	User      string    `json:"user"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	NextRetry time.Time `json:"nextRetry,omitzero"`
	Tools     int       `json:"tools"`
	Detail    string    `json:"detail,omitempty"`
	// Actions are what may be asked of the entry (ext.StatusEntry.Actions).
	Actions []string `json:"actions,omitempty"`
}

// ExtensionInfo describes an extension for status pages and the CLI.
type ExtensionInfo struct {
	Name         string           `json:"name"`
	Version      string           `json:"version,omitempty"`
	Description  string           `json:"description,omitempty"`
	State        string           `json:"state"`
	Error        string           `json:"error,omitempty"`
	Restarts     int              `json:"restarts"`
	PID          int              `json:"pid,omitempty"`
	InProcess    bool             `json:"inProcess"`
	Capabilities []ext.Capability `json:"capabilities,omitempty"`
	Path         string           `json:"path,omitempty"`
}

// Overview is the operator's summary: no secrets, no per-user data but
// counts.
type Overview struct {
	Version string `json:"version"`
	// Commit and CommitDate say which tree the host was built from ("" and
	// zero when the build had no VCS stamp).
	Commit           string          `json:"commit,omitempty"`
	CommitDate       time.Time       `json:"commitDate,omitzero"`
	ExtProtocol      int             `json:"extProtocol"`
	Started          time.Time       `json:"started"`
	Uptime           string          `json:"uptime"`
	Extensions       []ExtensionInfo `json:"extensions"`
	ActiveUsers      int             `json:"activeUsers"`
	ServiceProcesses int             `json:"serviceProcesses"`
	SecretsBackend   string          `json:"secretsBackend"`
	// Audit is the audit writer's counters (the records dropped among
	// them); nil when the audit log is off.
	Audit *audit.Stats `json:"audit,omitempty"`
}

// CallRequest is a tool call through the host with everything a client
// session brings: its progress token, _meta, task parameters and the
// session itself, through which the extension reports progress and asks
// the client (see [ext.Session]).
type CallRequest struct {
	User         string
	Conversation string
	Name         string
	Arguments    json.RawMessage
	// ProgressToken, Meta and Task are the client's, raw (nil: none).
	ProgressToken json.RawMessage
	Meta          json.RawMessage
	Task          json.RawMessage
	// Session is the calling client's session (nil: none).
	Session ext.Session
	// Scope, when set, bounds the call (a scoped token's): a tool outside
	// it is not found, as one the user does not have.
	Scope *ext.Scope
	// Credential and SessionID name, for the audit log, what the caller
	// authenticated with ("token:<id>", "oauth:<grant id>"; empty: the
	// Go API or the CLI) and the client's MCP session. Never a secret.
	Credential, SessionID string
	_                     struct{}
}

// PromptRequest asks for one of a user's prompts.
type PromptRequest struct {
	User         string
	Conversation string
	Name         string
	Arguments    json.RawMessage
	Session      ext.Session
	// Scope is as [CallRequest.Scope].
	Scope *ext.Scope
	// Credential and SessionID are as [CallRequest.Credential].
	Credential, SessionID string
	_                     struct{}
}

// ResourceRequest asks for one of a user's resources.
type ResourceRequest struct {
	User         string
	Conversation string
	URI          string
	Session      ext.Session
	// Scope is as [CallRequest.Scope]: a resource of a server outside it
	// (or of none) is not found.
	Scope *ext.Scope
	// Credential and SessionID are as [CallRequest.Credential].
	Credential, SessionID string
	_                     struct{}
}

// Prompt is a registered prompt and the extension that owns it.
type Prompt struct {
	ext.Prompt
	Extension string
}

// Resource is a registered resource and the extension that owns it.
type Resource struct {
	ext.Resource
	Extension string
}

// ResourceTemplate is a registered resource template and its extension.
type ResourceTemplate struct {
	ext.ResourceTemplate
	Extension string
}

// Instruction is a usage note for models and the extension it came from.
type Instruction struct {
	ext.Instruction
	Extension string
}

// Grant is an authorization a user gave an OAuth client (a "connected
// app"): which client, which scopes, since when. It never holds a token.
type Grant struct {
	// ID names the grant for revocation.
	ID string `json:"id"`
	// User is who consented.
	User string `json:"user"`
	// ClientID is the client's ID: an ID the server gave it at
	// registration, or the URL of its client ID metadata document.
	ClientID string `json:"clientId"`
	// Client is the client's name as it registered it (not verified), or
	// its ID when it gave none.
	Client string `json:"client"`
	// ClientURI is the client's home page as it registered it, if any.
	ClientURI string `json:"clientUri,omitempty"`
	// Scopes are the granted scopes.
	Scopes []string `json:"scopes"`
	// Created is when the user consented.
	Created time.Time `json:"created"`
	// LastUsed is when the grant's tokens were last used or refreshed
	// (recorded at most once a minute); zero if never.
	LastUsed time.Time `json:"lastUsed,omitzero"`
}
