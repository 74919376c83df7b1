package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/internal/surface"
	"github.com/agenthost/agenthost/host/internal/web"
)

// backend is what the verbs need: a running host through its control
// socket, or a host started in this process for one command.
type backend interface {
	Tools(ctx context.Context, user string) ([]api.Tool, error)
	Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error)
	Sections(ctx context.Context) ([]api.Section, error)
	GetSettings(ctx context.Context, user, extName, section string) (*api.SettingsValues, error)
	SetSettings(ctx context.Context, user, extName, section string, values json.RawMessage) error
	SetSecret(ctx context.Context, user, extName, name, value string) error
	DeleteSecret(ctx context.Context, user, extName, name string) error
	Status(ctx context.Context, user string) ([]api.StatusEntry, error)
	Extensions(ctx context.Context) ([]api.ExtensionInfo, error)
	Overview(ctx context.Context) (api.Overview, error)
	control.Tokens
	Close()
}

// remoteBackend is a running host.
type remoteBackend struct{ *control.Client }

// localBackend is a host in this process.
type localBackend struct {
	h      *host.Host
	auth   *auth.Store
	tokens control.Tokens
}

func (l *localBackend) Tools(ctx context.Context, user string) ([]api.Tool, error) {
	return l.h.Tools(ctx, user)
}

func (l *localBackend) Call(ctx context.Context, user, conv, name string, args json.RawMessage) (*ext.CallToolResult, error) {
	return l.h.Call(ctx, user, conv, name, args)
}

func (l *localBackend) Sections(context.Context) ([]api.Section, error) { return l.h.Sections(), nil }

func (l *localBackend) GetSettings(ctx context.Context, user, e, s string) (*api.SettingsValues, error) {
	return l.h.GetSettings(ctx, user, e, s)
}

func (l *localBackend) SetSettings(ctx context.Context, user, e, s string, v json.RawMessage) error {
	return l.h.SetSettings(ctx, user, e, s, v)
}

func (l *localBackend) SetSecret(ctx context.Context, user, e, n, v string) error {
	return l.h.SetSecret(ctx, user, e, n, v)
}

func (l *localBackend) DeleteSecret(ctx context.Context, user, e, n string) error {
	return l.h.DeleteSecret(ctx, user, e, n)
}

func (l *localBackend) Status(ctx context.Context, user string) ([]api.StatusEntry, error) {
	return l.h.Status(ctx, user)
}

func (l *localBackend) Extensions(context.Context) ([]api.ExtensionInfo, error) {
	return l.h.Extensions(), nil
}

func (l *localBackend) Overview(context.Context) (api.Overview, error) { return l.h.Overview(), nil }

var errNoTokens = fmt.Errorf("this host issues no tokens: %w", ext.ErrUnimplemented)

func (l *localBackend) CreateToken(ctx context.Context, user, name string, op bool) (string, control.TokenInfo, error) {
	if l.tokens == nil {
		return "", control.TokenInfo{}, errNoTokens
	}
	return l.tokens.CreateToken(ctx, user, name, op)
}

func (l *localBackend) ListTokens(ctx context.Context, user string) ([]control.TokenInfo, error) {
	if l.tokens == nil {
		return nil, errNoTokens
	}
	return l.tokens.ListTokens(ctx, user)
}

func (l *localBackend) RevokeToken(ctx context.Context, id string) error {
	if l.tokens == nil {
		return errNoTokens
	}
	return l.tokens.RevokeToken(ctx, id)
}

func (l *localBackend) CreateLoginLink(ctx context.Context, user string) (string, error) {
	if l.tokens == nil {
		return "", errNoTokens
	}
	return l.tokens.CreateLoginLink(ctx, user)
}

func (l *localBackend) Close() {
	_ = l.h.Close()
	if l.auth != nil {
		_ = l.auth.Close()
	}
}

// openBackend reaches the host of the config: through its control socket
// when one runs, else by starting it in this process.
func (a *app) openBackend(ctx context.Context) (backend, error) {
	cfg, err := host.LoadConfig(a.configPath)
	if err != nil {
		return nil, err
	}
	if c, err := control.Dial(ctx, cfg.DataPath()); err == nil {
		return remoteBackend{c}, nil
	}
	logger, err := a.logger(true)
	if err != nil {
		return nil, err
	}
	h, err := host.New(ctx, cfg, &host.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	store, err := surface.OpenAuth(cfg, logger)
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	return &localBackend{h: h, auth: store, tokens: &web.TokenAdmin{Store: store, BaseURL: cfg.BaseURL()}}, nil
}

// pickExtension resolves an empty extension name to the only extension
// with settings sections.
func pickExtension(ctx context.Context, b backend, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	secs, err := b.Sections(ctx)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	var names []string
	for _, s := range secs {
		if !seen[s.Extension] {
			seen[s.Extension] = true
			names = append(names, s.Extension)
		}
	}
	if len(names) == 1 {
		return names[0], nil
	}
	return "", usagef("--ext is required: the host has extensions %v", names)
}

// withBackend runs fn with the backend of the command's config and closes
// it after.
func (a *app) withBackend(cmd *cobra.Command, fn func(ctx context.Context, b backend) error) error {
	ctx := cmd.Context()
	b, err := a.openBackend(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(ctx, b)
}
