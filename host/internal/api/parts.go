package api

import (
	"context"
	"encoding/json"

	"github.com/agenthost/agenthost/ext"
)

// The host's parts as its surfaces use them, each declared once here:
// a surface's own Host interface (mcpendpoint.Host, web.Host,
// control.Host) is made of these and what it alone needs. *host.Host
// implements every part; its methods are called concurrently.

// Tools lists a user's tools, activating the user on first use.
type Tools interface {
	Tools(ctx context.Context, user string) ([]Tool, error)
}

// Caller runs a tool for req.User with the calling client's session;
// arguments and the result travel as raw JSON.
type Caller interface {
	CallTool(ctx context.Context, req *CallRequest) (*ext.CallToolResult, error)
}

// Settings reads and changes a user's settings sections and secrets
// (never showing a secret's value).
type Settings interface {
	Sections(ctx context.Context) ([]Section, error)
	GetSettings(ctx context.Context, user, extension, section string) (*SettingsValues, error)
	SetSettings(ctx context.Context, user, extension, section string, values json.RawMessage) error
	PatchSettings(ctx context.Context, user, extension, section string, patch json.RawMessage) error
	SetSecret(ctx context.Context, user, extension, name, value string) error
	DeleteSecret(ctx context.Context, user, extension, name string) error
}

// Status is what the status pages and the CLI show: a user's entries,
// the extensions, the operator's overview.
type Status interface {
	Status(ctx context.Context, user string) ([]StatusEntry, error)
	Extensions(ctx context.Context) ([]ExtensionInfo, error)
	Overview(ctx context.Context) (Overview, error)
}
