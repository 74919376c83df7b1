package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// pinsCmd is `agenthost pins`: the operator's view of the tool pins
// (README "Tool pinning"), their diffs and their approval, over the
// control socket (or a host started for the one command).
func (a *app) pinsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "pins", Short: "Tool pinning: list the tools whose definitions changed, show the diff, approve", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	var (
		user, tool  string
		all, asJSON bool
	)
	printJSON := func(v any) error {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	list := &cobra.Command{
		Use:   "list [--user U] [--all] [--json]",
		Short: "List the tools waiting for an approval (--all: every pinned tool)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				vs, err := b.Pins(ctx, user, "", all)
				if err != nil {
					return err
				}
				if asJSON {
					if vs == nil {
						vs = []pins.View{}
					}
					return printJSON(vs)
				}
				if len(vs) == 0 && !all {
					fmt.Fprintln(a.stdout, "No tool waits for an approval.")
					return nil
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "USER\tSERVER\tTOOL\tPIN\tAPPROVER\tSTATE\tSINCE\tHASH")
				for _, v := range vs {
					state, since, h := "approved", v.ApprovedAt, v.Hash
					if v.Pending {
						state, since, h = v.Change+", pending", v.PendingSince, v.PendingHash
					}
					approver := "user"
					if v.ByOperator {
						approver = "operator"
					}
					row(tw, v.User, v.Server, v.Tool, v.Mode, approver, state, since.Local().Format(time.DateTime), shortHash(h))
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().StringVar(&user, "user", "", "only this user's pins")
	list.Flags().BoolVar(&all, "all", false, "every pinned tool, approved ones too")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	diff := &cobra.Command{
		Use:   "diff SERVER [--tool T] [--user U] [--json]",
		Short: "Show the approved and the pending definitions of a server's changed tools, as a unified diff of pretty JSON",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				vs, err := b.Pins(ctx, user, args[0], false)
				if err != nil {
					return err
				}
				vs = onlyTool(vs, args[0], tool)
				if asJSON {
					if vs == nil {
						vs = []pins.View{}
					}
					return printJSON(vs)
				}
				if len(vs) == 0 {
					return fmt.Errorf("no pending change of server %q%s", args[0], forUser(user))
				}
				for _, v := range vs {
					who := "the operator approves"
					if !v.ByOperator {
						who = "the user approves"
					}
					fmt.Fprintf(a.stdout, "%s (user %s): %s, pin %s, %s, pending since %s\n", esc(v.Tool), esc(v.User), v.Change, v.Mode, who,
						v.PendingSince.Local().Format(time.DateTime))
					fmt.Fprintln(a.stdout, strings.TrimRight(v.Diff, "\n"))
					fmt.Fprintln(a.stdout)
				}
				return nil
			})
		},
	}
	diff.Flags().StringVar(&user, "user", "", "only this user's changes")
	diff.Flags().StringVar(&tool, "tool", "", "only this tool's (its name on the server, or server/tool)")
	diff.Flags().BoolVar(&asJSON, "json", false, "print JSON (with the old and new definitions)")
	approve := &cobra.Command{
		Use:   "approve SERVER [--tool T] [--user U]",
		Short: "Approve a server's pending tool changes: the operator's servers for every user who saw them, a user's own with --user",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				vs, err := b.ApprovePins(ctx, control.PinApproveRequest{Server: args[0], Tool: tool, User: user})
				if err != nil {
					return err
				}
				for _, v := range vs {
					fmt.Fprintf(a.stdout, "approved %s for user %s (%s)\n", esc(v.Tool), esc(v.User), shortHash(v.Hash))
				}
				return nil
			})
		},
	}
	approve.Flags().StringVar(&user, "user", "", "approve this user's changes only (a user's own server needs it)")
	approve.Flags().StringVar(&tool, "tool", "", "approve this tool only (its name on the server, or server/tool)")
	cmd.AddCommand(list, diff, approve)
	return cmd
}

func onlyTool(vs []pins.View, server, tool string) []pins.View {
	if tool == "" {
		return vs
	}
	if !strings.HasPrefix(tool, server+"/") {
		tool = server + "/" + tool
	}
	var out []pins.View
	for _, v := range vs {
		if v.Tool == tool {
			out = append(out, v)
		}
	}
	return out
}

func forUser(u string) string {
	if u == "" {
		return ""
	}
	return fmt.Sprintf(" for user %q", u)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
