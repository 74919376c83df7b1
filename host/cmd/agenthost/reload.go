package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/control"
)

func (a *app) reloadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Make the running host re-read its config file in place (as SIGHUP does): servers added or removed, a renewed TLS certificate; a bad file changes nothing",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			// The running host reads the file itself and says what is
			// wrong with it: only its data folder is read here.
			dir, err := host.DataPathOf(a.configPath)
			if err != nil {
				return err
			}
			c, err := control.Dial(ctx, dir)
			if err != nil {
				if _, cerr := host.LoadConfig(a.configPath); cerr != nil {
					return fmt.Errorf("no running agenthost found, and the file is not valid: %w", cerr)
				}
				return fmt.Errorf("no agenthost is running on %s (its control socket does not answer): start it with agenthost serve", dir)
			}
			defer c.Close()
			res, err := c.Reload(ctx)
			if err != nil {
				return err
			}
			if len(res.Changed) == 0 {
				fmt.Fprintln(a.stdout, "reloaded: nothing changed")
				return nil
			}
			fmt.Fprintf(a.stdout, "reloaded: %s\n", esc(strings.Join(res.Changed, ", ")))
			for _, r := range res.Restarted {
				fmt.Fprintf(a.stdout, "restarted extension %s\n", esc(r))
			}
			return nil
		},
	}
}
