package main

import (
	"context"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
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
	c, srv := control.Pipe(h, &web.TokenAdmin{Store: store, BaseURL: cfg.BaseURL}, nil, logger)
	return c, func() {
		c.Close()
		_ = srv.Close()
		_ = h.Close()
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
