// Package api holds the types the host's surfaces (the MCP endpoint, the
// web UI and JSON API, the control socket of the CLI) share with package
// host. Package host's exported types are aliases of these, so the
// surfaces never import package host; the host's parts the surfaces share
// are declared once here (parts.go: Tools, Caller, Settings, Status), each
// surface's interface of the host (mcpendpoint.Host, web.Host,
// control.Host) is made of them and what it alone uses, and *host.Host
// implements them all.
//
// The types are plain values: safe to copy and to share read-only between
// goroutines.
package api

import (
	"encoding/json"
	"fmt"
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
// session brings: it is the extension's request, [ext.CallToolRequest],
// one type from the endpoint to the extension (the host clears what is
// its own, Credential and SessionID, before the call reaches one).
type CallRequest = ext.CallToolRequest

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

// Approval is a tool call waiting for its user's approval (the host's
// tool policy), as the settings page and /api/v1/approvals show it.
type Approval struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// Arguments are the call's, compacted and cut to 1 KiB.
	Arguments string    `json:"arguments"`
	Created   time.Time `json:"created"`
	// Rule names the policy rule that asks for approval.
	Rule string `json:"rule"`
}

// ApprovalRequired is the error of a call the tool policy refused for
// want of approval (ID and URL set: approve it there, then call again)
// or because its user denied it (Denied). Its message is meant for the
// calling user: it names the tool and the link, nothing else. It matches
// ext.ErrPermission.
type ApprovalRequired struct {
	Tool   string
	ID     string
	URL    string
	Denied bool
}

func (e *ApprovalRequired) Error() string {
	switch {
	case e.Denied:
		return fmt.Sprintf("the call of tool %q was not approved: it did not run", e.Tool)
	case e.URL != "":
		return fmt.Sprintf("tool %q needs your approval for each call: approve this call at %s (or the tool for some minutes), then call it again", e.Tool, e.URL)
	}
	return fmt.Sprintf("tool %q needs your approval for each call: approve it on the settings page (%s), then call it again", e.Tool, e.ID)
}

// Unwrap makes the error match ext.ErrPermission.
func (e *ApprovalRequired) Unwrap() error { return ext.ErrPermission }

// ReloadResult is what a reload of the operator's file changed.
type ReloadResult struct {
	// Changed names what changed, as the file's fields ("tls",
	// "extensions.mcp.config"); empty when the file is as before.
	Changed []string `json:"changed"`
	// Restarted names the extensions restarted to take their new config
	// (they cannot take it in place), each with why.
	Restarted []string `json:"restarted,omitempty"`
}

// FleetEntry is one of a user's resources (for ext-mcp: a server) that
// is not well (quarantined, waiting for a sign-in, in error, or any
// state but connected and retiring), in the operator's fleet view. For
// a user not active now it is the last state seen while they were, and
// stays until they are active again and it recovers.
type FleetEntry struct {
	StatusEntry
	// Active says the user is active now: the entry is live.
	Active bool `json:"active"`
	// Seen is when the entry was last seen in that state.
	Seen time.Time `json:"seen"`
}
