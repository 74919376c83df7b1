// Package api declares what the host's surfaces (the MCP endpoint, the web
// UI and JSON API, the control socket of the CLI) need from the host, and
// the types they share. Package host implements [Host]; its exported types
// are aliases of these, so the surfaces never import package host.
//
// Every method is safe for concurrent use.
package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// Host is the host as its surfaces see it.
type Host interface {
	// Tools returns the user's tools (system and per-user), sorted by name,
	// activating the user on first use.
	Tools(ctx context.Context, user string) ([]Tool, error)
	// Call runs a tool for user; args and the result travel as raw JSON.
	Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error)
	// Subscribe returns a channel that receives a value (coalesced)
	// whenever the user's tools change; "" hears every change.
	Subscribe(user string) (events <-chan struct{}, cancel func())

	// Sections lists every extension's settings sections.
	Sections() []Section
	// GetSettings returns a user's values of one section and which secret
	// fields are set (secrets are never read back).
	GetSettings(ctx context.Context, user, extension, section string) (*SettingsValues, error)
	// SetSettings validates and stores a user's values of one section
	// (secret fields: a string sets, null clears, absent keeps) and
	// refreshes the user. Bad values give settings.FieldErrors naming each
	// field (errors.As), wrapping ext.ErrInvalidArgument.
	SetSettings(ctx context.Context, user, extension, section string, values json.RawMessage) error
	// SetSecret and DeleteSecret change one secret of a user (or of the
	// operator, user OperatorUser) for an extension and refresh.
	SetSecret(ctx context.Context, user, extension, name, value string) error
	DeleteSecret(ctx context.Context, user, extension, name string) error
	// SecretNames lists secret names (never values).
	SecretNames(ctx context.Context, user, extension string) ([]string, error)

	// Status reports every extension's per-user status (ext.StatusReporter)
	// for user, or for every user when user is "".
	Status(ctx context.Context, user string) ([]StatusEntry, error)
	// Extensions describes the extensions.
	Extensions() []ExtensionInfo
	// Overview is the operator's summary for the status page.
	Overview() Overview
}

// OperatorUser is the reserved user ID of the operator's own secrets.
const OperatorUser = "@operator"

// Tool is a registered tool and the extension that owns it.
type Tool struct {
	ext.Tool
	// Extension names the owner.
	Extension string
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
	Version          string          `json:"version"`
	Started          time.Time       `json:"started"`
	Uptime           string          `json:"uptime"`
	Extensions       []ExtensionInfo `json:"extensions"`
	ActiveUsers      int             `json:"activeUsers"`
	ServiceProcesses int             `json:"serviceProcesses"`
	SecretsBackend   string          `json:"secretsBackend"`
}
