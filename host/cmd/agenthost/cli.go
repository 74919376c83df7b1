package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/termsafe"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/serve"
)

// usageError marks bad usage (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exactArgs is cobra.ExactArgs with our usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d (see --help)", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	configPath     string
	logLevel       string
	logFormat      string
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	// Every byte the CLI prints passes a terminal-safe writer; the fields
	// that come from servers, users and extensions are escaped whole
	// (newlines and tabs too) by esc and row.
	stdout, stderr = termsafe.NewWriter(stdout), termsafe.NewWriter(stderr)
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "agenthost",
		Short:         "agenthost: a host for agent extensions (tools, per-user MCP servers, settings, secrets)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.PersistentFlags().StringVar(&a.configPath, "config", host.DefaultConfigFile, "the operator's config file")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(a.serveCmd(), a.toolsCmd(), a.callCmd(), a.settingsCmd(), a.secretCmd(), a.statusCmd(),
		a.tokenCmd(), a.userCmd(), a.loginLinkCmd(), a.authCmd(), a.extCmd(), a.oauthCmd(), a.configCmd(), a.versionCmd(),
		a.backupCmd(), a.restoreCmd(), a.auditCmd(), a.pinsCmd(), a.reloadCmd(), a.runnerCmd())
	// Unknown subcommands are usage errors too.
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q (see --help)", args[0])
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return root
}

func (a *app) logger(quietDefault bool) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(a.logLevel)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", a.logLevel)
	}
	if quietDefault && a.logLevel == "info" {
		// One-shot verbs keep stderr for their own errors.
		lvl = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch a.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", a.logFormat)
}

func (a *app) serveCmd() *cobra.Command {
	var demoUser, cpuProfile string
	cmd := &cobra.Command{
		Use:   "serve [--demo-user U]",
		Short: "Run the host and its surfaces (MCP endpoint, settings UI, JSON API, status page) until interrupted",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			logger, err := a.logger(false)
			if err != nil {
				return err
			}
			cfg, err := host.LoadConfig(a.configPath)
			if err != nil {
				return err
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer func() {
					pprof.StopCPUProfile()
					_ = f.Close()
				}()
			}
			// Listen before the host starts its extensions: they are told
			// the address bound (with port 0, the port the system chose), so
			// that no server may be pointed back at the host.
			tcp, err := net.Listen("tcp", cfg.ListenAddr())
			if err != nil {
				return fmt.Errorf("listening: %w", err)
			}
			h, err := host.New(ctx, cfg, &host.Options{Logger: logger, ListenAddr: tcp.Addr().String()})
			if err != nil {
				return errors.Join(err, tcp.Close())
			}
			s, err := serve.New(h, &serve.Options{Logger: logger, ControlSocket: true, Listener: tcp})
			if err != nil {
				return errors.Join(err, tcp.Close(), h.Close())
			}
			ln, err := s.Listen()
			if err != nil {
				return errors.Join(err, tcp.Close(), s.Close(), h.Close())
			}
			exts, _ := h.Extensions(ctx)
			fmt.Fprintf(a.stdout, "agenthost %s serving %d extension(s) at %s (control socket %s); Ctrl-C to stop\n",
				host.Build().Version, len(exts), s.URL(), s.ControlSocket())
			if demoUser != "" {
				if err := a.printDemo(ctx, s, demoUser); err != nil {
					return errors.Join(err, ln.Close(), s.Close(), h.Close())
				}
			}
			// SIGHUP re-reads the file in place, as `agenthost reload`
			// does (the host logs and audits each reload).
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			done, reloads := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(reloads)
				for {
					select {
					case <-hup:
						_, _ = h.Reload(ctx)
					case <-done:
						return
					}
				}
			}()
			serr := s.Serve(ctx, ln)
			signal.Stop(hup)
			close(done)
			<-reloads
			return errors.Join(serr, h.Close())
		},
	}
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write the host's CPU profile to this file until it stops")
	cmd.Flags().StringVar(&demoUser, "demo-user", "", "issue a fresh token and sign-in link for this user and print how to connect (demo)")
	return cmd
}

// printDemo issues the demo user a fresh MCP token (revoking the one of
// the previous start) and a one-time sign-in link, and prints how to use
// them.
func (a *app) printDemo(ctx context.Context, s *serve.Server, user string) error {
	if !host.ValidUser(user) {
		return usagef("--demo-user %q is not a valid user ID", user)
	}
	toks, err := s.Tokens(ctx, user)
	if err != nil {
		return err
	}
	for _, t := range toks {
		if t.Name == "demo" {
			_ = s.RevokeToken(ctx, t.ID)
		}
	}
	tok, err := s.CreateToken(ctx, user, "demo")
	if err != nil {
		return err
	}
	link, err := s.LoginLink(ctx, user)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, `
Demo user %[1]q is ready.

  Settings page:  %[2]s/settings
  Sign in once:   %[3]s
  MCP endpoint:   %[2]s/mcp
  MCP token:      %[4]s

Connect a real MCP client, for example:
  claude mcp add --transport http agenthost %[2]s/mcp --header "Authorization: Bearer %[4]s"
  npx -y %[5]s --cli %[2]s/mcp --transport http --header "Authorization: Bearer %[4]s" --method tools/list

`, user, s.URL(), link, tok, inspectorCLI)
	return nil
}

// inspectorCLI is the MCP Inspector the demo banner prints a command
// for, pinned: npx resolves an unpinned @modelcontextprotocol/inspector to
// whatever it finds, and on the Node 20 the README asks for that was an old
// inspector that refused URL arguments, or one that needs Node 22. 1.0.3
// runs on Node 20 (npm warns that it declares Node 22, nothing more) and
// its --cli mode takes the URL, --transport http and --header (0.15.0, the
// last to declare no engine, takes no header). examples/e2e/testdata/inspector
// pins the same version for the test that runs the printed command.
const inspectorCLI = "@modelcontextprotocol/inspector@1.0.3"

func (a *app) toolsCmd() *cobra.Command {
	var (
		user   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "tools --user U",
		Short: "List a user's tools",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return usagef("--user is required")
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				tools, err := b.Tools(ctx, user)
				if err != nil {
					return err
				}
				if err := printTools(a.stdout, tools, asJSON); err != nil {
					return err
				}
				return needsSignIn(ctx, b, user)
			})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "the user")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// needsSignIn fails, naming each one and how to sign in, when some of the
// user's servers wait for a sign-in: their tools are missing from the
// list.
func needsSignIn(ctx context.Context, b *control.Client, user string) error {
	st, err := b.Status(ctx, user)
	if err != nil {
		return err
	}
	var missing []string
	for _, e := range st {
		if e.State == ext.StateNeedsSignIn {
			missing = append(missing, esc(fmt.Sprintf("%s/%s needs sign-in: %s", e.Extension, e.Name, e.Reason)))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &linesError{fmt.Sprintf("the tools of %d server(s) are missing until %s signs in:\n  %s", len(missing), esc(user), strings.Join(missing, "\n  "))}
}

// printTools prints tools as a table, or with --json in their one JSON
// shape (the JSON API's).
func printTools(w io.Writer, tools []host.Tool, asJSON bool) error {
	if asJSON {
		if tools == nil {
			tools = []host.Tool{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(tools)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tEXPOSURE\tEXTENSION\tDESCRIPTION")
	for _, t := range tools {
		desc := strings.SplitN(t.Description, "\n", 2)[0]
		row(tw, t.Name, t.Exposure, t.Extension, desc)
	}
	return tw.Flush()
}

func (a *app) callCmd() *cobra.Command {
	var (
		user, conversation string
	)
	cmd := &cobra.Command{
		Use:   "call --user U NAME ARGS_JSON",
		Short: "Call a tool as a user and print its result as JSON",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if user == "" {
				return usagef("--user is required")
			}
			if !json.Valid([]byte(args[1])) {
				return usagef("ARGS_JSON is not valid JSON: %s", args[1])
			}
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				res, err := b.Call(ctx, user, conversation, args[0], json.RawMessage(args[1]))
				if err != nil {
					return err
				}
				if err := printResult(a.stdout, res); err != nil {
					return err
				}
				if res.IsError {
					return fmt.Errorf("tool %q failed: %s", args[0], esc(res.Text()))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "the user")
	cmd.Flags().StringVar(&conversation, "conversation", "", "the conversation, if any")
	return cmd
}

func printResult(w io.Writer, res *ext.CallToolResult) error {
	res, err := res.Fields()
	if err != nil {
		return err
	}
	out := struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
		IsError           bool            `json:"isError,omitempty"`
	}{res.Content, res.StructuredContent, res.IsError}
	if out.Content == nil {
		out.Content = json.RawMessage("[]")
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func (a *app) extCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "ext", Short: "Extensions", Args: exactArgs(0)}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the extensions and their state",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b *control.Client) error {
				infos, err := b.Extensions(ctx)
				if err != nil {
					return err
				}
				sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(infos)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tVERSION\tSTATE\tRESTARTS\tCAPABILITIES")
				for _, e := range infos {
					caps := make([]string, len(e.Capabilities))
					for i, c := range e.Capabilities {
						caps[i] = string(c)
					}
					row(tw, e.Name, e.Version, e.State, e.Restarts, strings.Join(caps, ","))
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list, a.actionCmd())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(a.stdout, "agenthost %s, extension protocol %d\n", host.Build(), ext.ProtocolVersion)
			return nil
		},
	}
}

// esc escapes a string that comes from a server, a user or an extension
// (a tool's name or description, a status reason, an error) for the
// terminal: control characters, newlines and tabs included, so that it
// can neither send escape sequences nor forge a line or a cell. The CLI's
// streams escape control characters again (keeping its own newlines and
// tabs), so JSON output is covered as well.
func esc(s string) string { return termsafe.String(s) }

// row writes one table row, each cell escaped, cells separated by tabs.
func row(w io.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = esc(fmt.Sprint(c))
	}
	fmt.Fprintln(w, strings.Join(parts, "\t"))
}

// linesError is an error of several lines the CLI wrote itself, every
// outside part already escaped: it is printed as it is.
type linesError struct{ msg string }

func (e *linesError) Error() string { return e.msg }
