package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host/internal/audit"
	"github.com/agenthost/agenthost/host/internal/control"
)

// auditCmd reads the audit log: a table, or JSON lines (--json, the
// export), and with --follow the new records as they come.
func (a *app) auditCmd() *cobra.Command {
	var (
		f              audit.Filter
		since          string
		asJSON, follow bool
	)
	cmd := &cobra.Command{
		Use:   "audit [--user U] [--server S] [--tool T] [--outcome ok|tool_error|refused|error] [--since 1h|TIME] [--json] [--follow]",
		Short: "Read the audit log: who called which tool, when, with what outcome (--json prints JSON lines, the export)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since != "" {
				t, err := audit.ParseSince(since, time.Now())
				if err != nil {
					return usagef("%v", err)
				}
				f.Since = t
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				enc := json.NewEncoder(a.stdout)
				var tw *tabwriter.Writer
				if !asJSON {
					tw = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "TIME\tUSER\tCREDENTIAL\tTOOL\tOUTCOME\tDURATION\tTOOL HASH\tREASON")
				}
				show := func(recs []audit.Record) error {
					for _, r := range recs {
						if asJSON {
							if err := enc.Encode(r); err != nil {
								return err
							}
							continue
						}
						h := r.ToolHash
						if len(h) > 12 {
							h = h[:12]
						}
						row(tw, r.Time.Local().Format(time.DateTime), r.User, r.Credential, r.Tool, r.Outcome, r.Duration.Round(time.Microsecond), h, r.Reason)
					}
					if tw != nil {
						return tw.Flush()
					}
					return nil
				}
				recs, err := b.Audit(ctx, f)
				if err != nil {
					return err
				}
				if err := show(recs); err != nil {
					return err
				}
				if !follow {
					return nil
				}
				for _, r := range recs {
					f.AfterID = max(f.AfterID, r.ID)
				}
				f.Since, f.Limit = time.Time{}, 0
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return nil
					case <-t.C:
					}
					recs, err := b.Audit(ctx, f)
					if err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return err
					}
					for _, r := range recs {
						f.AfterID = max(f.AfterID, r.ID)
					}
					if err := show(recs); err != nil {
						return err
					}
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.User, "user", "", "only this user's records")
	fl.StringVar(&f.Server, "server", "", "only this server's")
	fl.StringVar(&f.Tool, "tool", "", "only this tool's (server/tool)")
	fl.StringVar(&f.Outcome, "outcome", "", "only this outcome: ok, tool_error, refused, error")
	fl.StringVar(&f.Kind, "kind", "", "only this kind: tool, prompt, resource, token, signin, settings, approval")
	fl.StringVar(&since, "since", "", "only records since a time (RFC 3339) or a duration back (1h)")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many, the newest (default 1000)")
	fl.BoolVar(&asJSON, "json", false, "print JSON lines (one record a line: the export)")
	fl.BoolVar(&follow, "follow", false, "keep printing new records until interrupted")
	return cmd
}
