package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/settings"
)

func (a *app) settingsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "settings", Short: "Read or change a user's settings", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	var user, extName string
	get := &cobra.Command{
		Use:   "get --user U [--ext E] [SECTION]",
		Short: "Print a user's settings (every section, or one) as JSON; secrets show only as set or not",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("settings get takes at most one SECTION")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if user == "" {
				return usagef("--user is required")
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				secs, err := b.Sections(ctx)
				if err != nil {
					return err
				}
				type out struct {
					Extension string          `json:"extension"`
					Section   string          `json:"section"`
					Title     string          `json:"title"`
					Values    json.RawMessage `json:"values"`
					Secrets   map[string]bool `json:"secrets,omitempty"`
				}
				var all []out
				for _, s := range secs {
					if (extName != "" && s.Extension != extName) || (len(args) == 1 && s.ID != args[0]) || s.Scope != "user" {
						continue
					}
					v, err := b.GetSettings(ctx, user, s.Extension, s.ID)
					if err != nil {
						return err
					}
					all = append(all, out{Extension: s.Extension, Section: s.ID, Title: s.Title, Values: v.Values, Secrets: v.Secrets})
				}
				if len(all) == 0 && len(args) == 1 {
					return fmt.Errorf("no settings section %q", args[0])
				}
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			})
		},
	}
	get.Flags().StringVar(&user, "user", "", "the user")
	get.Flags().StringVar(&extName, "ext", "", "only this extension")
	var setUser, setExt string
	var merge bool
	set := &cobra.Command{
		Use:   "set --user U [--ext E] [--merge] SECTION VALUES_JSON",
		Short: "Replace a user's values of one section, or with --merge change only the keys given (JSON Merge Patch: null resets a key); VALUES_JSON '-' reads stdin; the running host applies them at once",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if setUser == "" {
				return usagef("--user is required")
			}
			raw := []byte(args[1])
			if args[1] == "-" {
				b, err := io.ReadAll(io.LimitReader(a.stdin, 8<<20))
				if err != nil {
					return err
				}
				raw = bytes.TrimSpace(b)
			}
			if !json.Valid(raw) {
				return usagef("VALUES_JSON is not valid JSON")
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				e, err := pickExtension(ctx, b, setExt)
				if err != nil {
					return err
				}
				write := b.SetSettings
				if merge {
					write = b.PatchSettings
				}
				if err := write(ctx, setUser, e, args[0], raw); err != nil {
					var fe settings.FieldErrors
					if errors.As(err, &fe) {
						for _, f := range fe {
							fmt.Fprintf(a.stderr, "  %s: %s\n", esc(orRoot(f.Field)), esc(f.Msg))
						}
					}
					return err
				}
				fmt.Fprintf(a.stdout, "saved %s/%s for %s\n", esc(e), esc(args[0]), esc(setUser))
				return nil
			})
		},
	}
	set.Flags().StringVar(&setUser, "user", "", "the user")
	set.Flags().StringVar(&setExt, "ext", "", "the extension (default: the only one with settings)")
	set.Flags().BoolVar(&merge, "merge", false, "merge VALUES_JSON into the stored values (RFC 7396 JSON Merge Patch) instead of replacing them")
	cmd.AddCommand(get, set)
	return cmd
}

func orRoot(f string) string {
	if f == "" {
		return "(values)"
	}
	return f
}

func (a *app) secretCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Store or delete a secret (the value is read from stdin, never from argv)", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	owner := func(user string, operator bool) (string, error) {
		switch {
		case operator && user != "":
			return "", usagef("give --user or --operator, not both")
		case operator:
			return host.OperatorUser, nil
		case user == "":
			return "", usagef("--user or --operator is required")
		}
		return user, nil
	}
	var (
		user, extName string
		operator      bool
	)
	set := &cobra.Command{
		Use:   "set (--user U | --operator) [--ext E] NAME < value",
		Short: "Store a secret, e.g. `secret set --user alice token:github` (ext-mcp reads token:<server>)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			who, err := owner(user, operator)
			if err != nil {
				return err
			}
			raw, err := io.ReadAll(io.LimitReader(a.stdin, 1<<20+1))
			if err != nil {
				return fmt.Errorf("reading the secret from stdin: %w", err)
			}
			value := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
			if value == "" {
				return usagef("the secret on stdin is empty (use `secret delete` to remove one)")
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				e, err := pickExtension(ctx, b, extName)
				if err != nil {
					return err
				}
				if err := b.SetSecret(ctx, who, e, args[0], value); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "stored secret %q for %s in %s\n", args[0], esc(displayOwner(who)), esc(e))
				return nil
			})
		},
	}
	set.Flags().StringVar(&user, "user", "", "the user")
	set.Flags().BoolVar(&operator, "operator", false, "the operator's own secret (a shared server's credential)")
	set.Flags().StringVar(&extName, "ext", "", "the extension (default: the only one with settings)")
	var (
		duser, dext string
		dop         bool
	)
	del := &cobra.Command{
		Use:   "delete (--user U | --operator) [--ext E] NAME",
		Short: "Delete a secret",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			who, err := owner(duser, dop)
			if err != nil {
				return err
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				e, err := pickExtension(ctx, b, dext)
				if err != nil {
					return err
				}
				if err := b.DeleteSecret(ctx, who, e, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deleted secret %q for %s in %s\n", args[0], esc(displayOwner(who)), esc(e))
				return nil
			})
		},
	}
	del.Flags().StringVar(&duser, "user", "", "the user")
	del.Flags().BoolVar(&dop, "operator", false, "the operator's own secret")
	del.Flags().StringVar(&dext, "ext", "", "the extension (default: the only one with settings)")
	cmd.AddCommand(set, del)
	return cmd
}

func displayOwner(who string) string {
	if who == host.OperatorUser {
		return "the operator"
	}
	return who
}

func (a *app) statusCmd() *cobra.Command {
	var (
		user   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status [--user U] [--json]",
		Short: "Show the host, its extensions, and each user's servers: state, reason, next retry, tool count",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				if user != "" {
					// Activate the user so the status shows their servers.
					if _, err := b.Tools(ctx, user); err != nil {
						return err
					}
				}
				ov, err := b.Overview(ctx)
				if err != nil {
					return err
				}
				st, err := b.Status(ctx, user)
				if err != nil {
					return err
				}
				// The fleet view: every user's servers that are not
				// well, also of users not active now.
				var fleet []host.FleetEntry
				if user == "" {
					if fleet, err = b.Fleet(ctx); err != nil {
						return err
					}
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(struct {
						Host   any `json:"host"`
						Status any `json:"status"`
						Fleet  any `json:"fleet,omitempty"`
					}{ov, st, fleet})
				}
				fmt.Fprintf(a.stdout, "agenthost %s, up %s, %d active user(s), %d service process(es), secrets in %s\n",
					esc(ov.Version), esc(ov.Uptime), ov.ActiveUsers, ov.ServiceProcesses, esc(ov.SecretsBackend))
				if au := ov.Audit; au != nil {
					fmt.Fprintf(a.stdout, "audit log: %d written, %d dropped (queue full), %d failed, %d queued\n", au.Written, au.Dropped, au.Failed, au.Queued)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "\nEXTENSION\tSTATE\tRESTARTS\tERROR")
				for _, e := range ov.Extensions {
					row(tw, e.Name, e.State, e.Restarts, e.Error)
				}
				if len(st) > 0 {
					fmt.Fprintln(tw, "\nUSER\tEXTENSION\tNAME\tSTATE\tTOOLS\tNEXT RETRY\tREASON")
					for _, s := range st {
						retry := ""
						if !s.NextRetry.IsZero() {
							retry = time.Until(s.NextRetry).Round(time.Second).String()
						}
						row(tw, s.User, s.Extension, s.Name, s.State, s.Tools, retry, s.Reason)
					}
				}
				if len(fleet) > 0 {
					fmt.Fprintln(tw, "\nNOT WELL (every user)\tEXTENSION\tNAME\tSTATE\tACTIVE\tSEEN\tREASON")
					for _, f := range fleet {
						active := "no"
						if f.Active {
							active = "yes"
						}
						row(tw, f.User, f.Extension, f.Name, f.State, active, f.Seen.Format(time.RFC3339), f.Reason)
					}
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				// The entries' details (a runner's queue, last runs and
				// the tail of their output), each under its name.
				for _, s := range st {
					if s.Detail == "" {
						continue
					}
					fmt.Fprintf(a.stdout, "\n%s %s/%s", esc(s.User), esc(s.Extension), esc(s.Name))
					if len(s.Actions) > 0 {
						fmt.Fprintf(a.stdout, " (actions: %s)", esc(strings.Join(s.Actions, ", ")))
					}
					fmt.Fprintln(a.stdout, ":")
					for _, l := range strings.Split(s.Detail, "\n") {
						fmt.Fprintf(a.stdout, "  %s\n", esc(l))
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "only this user")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) tokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Issue, list and revoke bearer tokens for the MCP endpoint and the web UI", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	var (
		user, name, expires string
		operator            bool
		servers, tools      []string
	)
	create := &cobra.Command{
		Use:   "create (--user U | --operator) --name NAME [--servers S[,S] [--tools GLOB[,GLOB]]] [--expires 30m|TIME]",
		Short: "Issue a token; it is printed once and stored only as a hash",
		Long: `Issue a token; it is printed once and stored only as a hash.

--servers narrows a user's token to those servers' tools, prompts and resources
on /mcp (the rest is absent, as if the user had none); --tools narrows its tools
further to those a glob matches: path.Match patterns over "server/tool", where
"*" stops at "/" (notes/* is every tool of notes, notes/list_* some of them). A
scoped token opens /mcp only, not the settings page or the JSON API. --expires
ends the token after a duration (30m, 2h) or at a time (RFC 3339, e.g.
2026-12-31T18:00:00Z); its open sessions end then too.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (user == "") == !operator {
				return usagef("give exactly one of --user or --operator")
			}
			if name == "" {
				return usagef("--name is required (e.g. laptop)")
			}
			var scope *ext.Scope
			if len(servers) > 0 {
				scope = &ext.Scope{Servers: servers, Tools: tools}
			} else if len(tools) > 0 {
				return usagef("--tools needs --servers (the globs narrow those servers' tools)")
			}
			var until time.Time
			if expires != "" {
				var err error
				if until, err = parseExpiry(expires, time.Now()); err != nil {
					return err
				}
			}
			if operator && (scope != nil || !until.IsZero()) {
				return usagef("an operator token has no --servers, --tools or --expires")
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				var (
					tok  string
					info control.TokenInfo
					err  error
				)
				if scope != nil || !until.IsZero() {
					tok, info, err = b.CreateScopedToken(ctx, user, name, scope, until)
				} else {
					tok, info, err = b.CreateToken(ctx, user, name, operator)
				}
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, tok)
				fmt.Fprintf(a.stderr, "token %s (%s) for %s; it is shown only this once\n", esc(info.ID), esc(info.Name), esc(ownerOf(info.User, info.Operator)))
				if info.Scope != nil || !info.Expires.IsZero() {
					fmt.Fprintf(a.stderr, "scope: %s; expires: %s\n", esc(info.Scope.String()), esc(expiryOf(info)))
				}
				return nil
			})
		},
	}
	create.Flags().StringVar(&user, "user", "", "the user")
	create.Flags().BoolVar(&operator, "operator", false, "an operator token (status page)")
	create.Flags().StringVar(&name, "name", "", "a name to recognise the token by")
	create.Flags().StringSliceVar(&servers, "servers", nil, "only these servers (comma-separated)")
	create.Flags().StringSliceVar(&tools, "tools", nil, `only the tools these path.Match globs over "server/tool" match (comma-separated)`)
	create.Flags().StringVar(&expires, "expires", "", "expire after a duration (30m) or at a time (RFC 3339)")
	var (
		luser  string
		asJSON bool
	)
	list := &cobra.Command{
		Use:   "list [--user U]",
		Short: "List tokens (never their values)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				toks, err := b.ListTokens(ctx, luser)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(toks)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tOWNER\tNAME\tCREATED\tLAST USED\tSCOPE\tEXPIRES")
				for _, t := range toks {
					last := "never"
					if !t.LastUsed.IsZero() {
						last = t.LastUsed.Format(time.RFC3339)
					}
					scope := t.Scope.String()
					if t.Operator {
						scope = "status page"
					}
					if t.Extension != "" {
						scope += " (minted by " + t.Extension + ")"
					}
					row(tw, t.ID, ownerOf(t.User, t.Operator), t.Name, t.Created.Format(time.RFC3339), last, scope, expiryOf(t))
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().StringVar(&luser, "user", "", "only this user's tokens")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token at once (open sessions that used it end too)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				if err := b.RevokeToken(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "revoked %s\n", esc(args[0]))
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// parseExpiry reads --expires: a duration from now (30m, 2h) or a time
// (RFC 3339).
func parseExpiry(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, usagef("--expires %s: give a positive duration", v)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef("--expires %q: give a duration (30m, 2h) or a time (RFC 3339, e.g. 2026-12-31T18:00:00Z)", v)
	}
	if !t.After(now) {
		return time.Time{}, usagef("--expires %s is not in the future", v)
	}
	return t, nil
}

// expiryOf words a token's expiry for the list.
func expiryOf(t control.TokenInfo) string {
	switch {
	case t.Expires.IsZero():
		return "never"
	case t.Expired:
		return "expired " + t.Expires.Format(time.RFC3339)
	}
	return t.Expires.Format(time.RFC3339)
}

func ownerOf(user string, operator bool) string {
	if operator {
		return "(operator)"
	}
	return user
}

func (a *app) loginLinkCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "login-link --user U",
		Short: "Print a one-time sign-in link to the settings page",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return usagef("--user is required")
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				u, err := b.CreateLoginLink(ctx, user)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, u)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "the user")
	return cmd
}
