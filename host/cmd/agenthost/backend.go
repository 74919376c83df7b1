package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/internal/oauthserver"
	"github.com/agenthost/agenthost/host/internal/web"
)

// openBackend reaches the host of the config, always through its control
// API: the running host's socket when one answers, else a host started in
// this process for the one command, served on an in-memory pipe. close
// releases whatever was opened.
func (a *app) openBackend(ctx context.Context) (c *control.Client, close func(), err error) {
	cfg, err := host.LoadConfig(a.configPath)
	if err != nil {
		return nil, nil, err
	}
	if c, err := control.Dial(ctx, cfg.DataPath()); err == nil {
		return c, c.Close, nil
	}
	logger, err := a.logger(true)
	if err != nil {
		return nil, nil, err
	}
	h, err := host.New(ctx, cfg, &host.Options{Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	store, err := auth.Open(filepath.Join(cfg.DataPath(), auth.FileName), &auth.Options{Logger: logger})
	if err != nil {
		_ = h.Close()
		return nil, nil, err
	}
	admin := &web.TokenAdmin{Store: store, BaseURL: cfg.BaseURL, Host: h}
	// Users of an install from before the users table.
	if known, err := h.KnownUsers(ctx); err == nil {
		_, _ = store.RecordUsers(ctx, known)
	}
	// No server runs: a disabled or deleted user's OAuth grants are
	// revoked in its store directly (the server does it when it runs).
	var grants *oauthserver.SQLite
	if oauthPath := filepath.Join(cfg.DataPath(), oauthserver.FileName); fileExists(oauthPath) {
		if grants, err = oauthserver.OpenSQLite(oauthPath, nil); err != nil {
			_ = h.Close()
			_ = store.Close()
			return nil, nil, err
		}
		admin.Apps = grants
	}
	stopUsers := store.OnUserChange(func(ev auth.UserEvent) {
		if grants != nil && (ev.Change == auth.UserDisabled || ev.Change == auth.UserDeleted) {
			if _, err := grants.RevokeUserGrants(ctx, ev.User); err != nil {
				logger.Error("revoking the OAuth grants of a user", "user", ev.User, "err", err)
			}
		}
	})
	c, srv := control.Pipe(h, admin, nil, logger)
	return c, func() {
		c.Close()
		_ = srv.Close()
		stopUsers()
		_ = h.Close()
		if grants != nil {
			_ = grants.Close()
		}
		_ = store.Close()
	}, nil
}

// pickExtension resolves an empty extension name to the only extension
// with settings sections.
func pickExtension(ctx context.Context, c *control.Client, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	secs, err := c.Sections(ctx)
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

// withBackend runs fn with the host of the command's config and closes it
// after.
func (a *app) withBackend(cmd *cobra.Command, fn func(ctx context.Context, c *control.Client) error) error {
	ctx := cmd.Context()
	c, closeFn, err := a.openBackend(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	return fn(ctx, c)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
