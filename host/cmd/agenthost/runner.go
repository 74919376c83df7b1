package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host/internal/control"
)

// actionCmd is `agenthost ext action EXT NAME ACTION --user U`: an action
// an extension's status entry offers, as the operator.
func (a *app) actionCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "action EXT NAME ACTION --user U",
		Short: "Ask an extension for an action its status offers on one of a user's entries (agenthost status lists them)",
		Args:  exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAction(cmd, args[0], user, args[1], args[2])
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "the entry's user (required)")
	return cmd
}

// runnerCmd is `agenthost runner run NAME --user U`: ext action runner
// NAME run, shorter.
func (a *app) runnerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "runner", Short: "Runners (the ext-runner extension)", Args: exactArgs(0)}
	var user, extName string
	run := &cobra.Command{
		Use:   "run NAME --user U",
		Short: "Start a session of a runner now (queued when it runs already)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAction(cmd, extName, user, args[0], "run")
		},
	}
	run.Flags().StringVar(&user, "user", "", "the runner's user (required)")
	run.Flags().StringVar(&extName, "ext", "runner", "the runner extension's name in the config")
	cmd.AddCommand(run)
	return cmd
}

func (a *app) runAction(cmd *cobra.Command, extName, user, name, action string) error {
	if user == "" {
		return usagef("--user is required: the user whose %s/%s it is", extName, name)
	}
	return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
		msg, err := b.RunAction(ctx, extName, user, name, action)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s/%s of %s: %s\n", esc(extName), esc(name), esc(user), esc(msg))
		return nil
	})
}
