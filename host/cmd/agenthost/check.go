package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
)

// configCmd is `agenthost config check`: the operator's file validated as
// serve would load it, without serving.
func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "The operator's config file", Args: exactArgs(0)}
	check := &cobra.Command{
		Use:   "check [--config F]",
		Short: "Validate the config file and each extension's config without serving: prints the tool policy's rules and ok, or every problem naming its field (exit 1)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := a.logger(true)
			if err != nil {
				return err
			}
			cfg, err := host.LoadConfig(a.configPath)
			if err != nil {
				return err
			}
			// Each extension is started and configured as serve would, but
			// on a data folder of its own that is removed after, with
			// secrets in memory: nothing of the host's data is read or
			// made, and nothing listens.
			tmp, err := os.MkdirTemp("", "agenthost-config-check-")
			if err != nil {
				return fmt.Errorf("config check: a scratch data folder: %w", err)
			}
			defer os.RemoveAll(tmp)
			cfg.DataDir = tmp
			cfg.Secrets.Backend = "memory"
			h, err := host.New(cmd.Context(), cfg, &host.Options{Logger: logger})
			if err != nil {
				return fmt.Errorf("config %s: %w", a.configPath, err)
			}
			if err := h.Close(); err != nil {
				return fmt.Errorf("config check: stopping the extensions: %w", err)
			}
			if cfg.Policy != nil {
				// The operator sees the tool policy as the host reads it:
				// its precedence and each rule by name.
				for _, l := range cfg.Policy.Describe() {
					fmt.Fprintln(a.stdout, l)
				}
			}
			fmt.Fprintln(a.stdout, "ok")
			return nil
		},
	}
	cmd.AddCommand(check)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}
