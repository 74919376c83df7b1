package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host/internal/control"
)

// userCmd is `agenthost user`: the operator's verbs on users, over the
// control socket like the token verbs.
func (a *app) userCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "List, disable, enable and delete users; set their groups", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the users: source, created, last seen, disabled, tokens, connected apps, servers in trouble",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				users, err := b.ListUsers(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(users)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "USER\tSOURCE\tCREATED\tLAST SEEN\tDISABLED\tTOKENS\tAPPS\tGROUPS\tTROUBLE")
				for _, u := range users {
					last, disabled := "never", "-"
					if !u.LastSeen.IsZero() {
						last = u.LastSeen.Format(time.RFC3339)
					}
					if !u.Disabled.IsZero() {
						disabled = u.Disabled.Format(time.RFC3339) + " by " + u.DisabledBy
					}
					trouble := "-"
					if len(u.Trouble) > 0 {
						trouble = strings.Join(u.Trouble, "; ")
					}
					groups := "-"
					if len(u.Groups) > 0 {
						groups = strings.Join(u.Groups, ",")
					}
					row(tw, u.Name, u.Source, u.Created.Format(time.RFC3339), last, disabled,
						strconv.Itoa(u.Tokens), strconv.Itoa(u.Apps), groups, trouble)
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	disable := &cobra.Command{
		Use:   "disable USER",
		Short: "Disable a user at once: their tokens, web sessions, login links and connected apps are revoked, open MCP sessions closed, processes stopped; sign-in refused until enabled",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				if err := b.DisableUser(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "disabled %s\n", esc(args[0]))
				return nil
			})
		},
	}
	enable := &cobra.Command{
		Use:   "enable USER",
		Short: "Let a disabled user sign in again (their old tokens and apps stay revoked)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				if err := b.EnableUser(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "enabled %s\n", esc(args[0]))
				return nil
			})
		},
	}
	var deleteData bool
	del := &cobra.Command{
		Use:   "delete USER [--delete-data]",
		Short: "Delete a user: as disable, then their tokens, grants, settings and secrets; their data folder too with --delete-data",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				res, err := b.DeleteUser(ctx, args[0], deleteData)
				if err != nil {
					return err
				}
				switch {
				case res.DataDeleted:
					fmt.Fprintf(a.stdout, "deleted %s and their data folder %s\n", esc(args[0]), esc(res.Folder))
				case res.Folder != "":
					fmt.Fprintf(a.stdout, "deleted %s; their data folder is kept: %s\n", esc(args[0]), esc(res.Folder))
				default:
					fmt.Fprintf(a.stdout, "deleted %s\n", esc(args[0]))
				}
				return nil
			})
		},
	}
	del.Flags().BoolVar(&deleteData, "delete-data", false, "also delete the user's data folder (users/USER/)")
	setGroups := &cobra.Command{
		Use:   "set-groups USER [GROUP,GROUP...]",
		Short: "Set the groups the operator gives a user (beside their provider's); none clears them",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var groups []string
			if len(args) == 2 {
				for g := range strings.SplitSeq(args[1], ",") {
					if g = strings.TrimSpace(g); g != "" {
						groups = append(groups, g)
					}
				}
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				u, err := b.SetUserGroups(ctx, args[0], groups)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s: groups %s\n", esc(u.Name), esc(strings.Join(u.Groups, ",")))
				return nil
			})
		},
	}
	cmd.AddCommand(list, disable, enable, del, setGroups)
	return cmd
}
