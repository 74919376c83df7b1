package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/serve"
)

// authCmd is `agenthost auth login`: an OAuth sign-in of a user (or the
// operator) to a remote resource of an extension, such as an MCP server.
//
// With a running host the sign-in goes through its control socket: the
// command prints the URL to open and waits until the browser came back to
// the host's /oauth/callback (--no-wait returns at once; the callback page
// tells the person how it went). Without one, the command serves the
// host's surfaces itself on the configured address for as long as the
// sign-in waits: the authorization server must redirect to a host that
// listens.
func (a *app) authCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "auth", Short: "Sign users (or the operator) in to remote servers that use OAuth", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	var (
		user, extName    string
		operator, noWait bool
	)
	login := &cobra.Command{
		Use:   "login (--user U | --operator) [--ext E] [--no-wait] SERVER",
		Short: "Print the URL to sign in to SERVER with OAuth, and wait until the browser comes back",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			who := user
			switch {
			case operator && user != "":
				return usagef("give --user or --operator, not both")
			case operator:
				who = host.OperatorUser
			case user == "":
				return usagef("--user or --operator is required")
			}
			ctx := cmd.Context()
			cfg, err := host.LoadConfig(a.configPath)
			if err != nil {
				return err
			}
			if c, err := control.Dial(ctx, cfg.DataPath()); err == nil {
				defer c.Close()
				e, err := pickAuthExtension(ctx, c, extName)
				if err != nil {
					return err
				}
				st, err := c.BeginAuth(ctx, who, e, args[0])
				if err != nil {
					return err
				}
				a.printSignIn(who, args[0], st)
				if noWait {
					return nil
				}
				res, err := c.WaitAuth(ctx, st.State)
				return a.signInResult(res, err)
			}
			if noWait {
				return usagef("--no-wait needs a running host (agenthost serve): nothing else would receive the browser's redirect")
			}
			return a.signInInProcess(ctx, cfg, who, extName, args[0])
		},
	}
	login.Flags().StringVar(&user, "user", "", "the user who signs in")
	login.Flags().BoolVar(&operator, "operator", false, "the operator signs in (a shared server's credential)")
	login.Flags().StringVar(&extName, "ext", "", "the extension (default: the only one that signs in)")
	login.Flags().BoolVar(&noWait, "no-wait", false, "print the URL and return; the running host completes the sign-in")
	cmd.AddCommand(login)
	return cmd
}

// signInInProcess runs the host and its surfaces here, on the configured
// address, until the sign-in ends.
func (a *app) signInInProcess(ctx context.Context, cfg *host.Config, who, extName, name string) error {
	logger, err := a.logger(true)
	if err != nil {
		return err
	}
	// Listened on first, as serve does: extensions are told the port bound.
	tcp, err := net.Listen("tcp", cfg.ListenAddr())
	if err != nil {
		return fmt.Errorf("no agenthost is running, and serving this sign-in here failed: listening: %w", err)
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
		return errors.Join(fmt.Errorf("no agenthost is running, and serving this sign-in here failed: %w", err), tcp.Close(), s.Close(), h.Close())
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.WithoutCancel(ctx), ln) }()
	stop := func() error { return errors.Join(s.Close(), <-done, h.Close()) }
	fmt.Fprintf(a.stderr, "No agenthost is running: serving %s here until this sign-in ends (the browser comes back to it; other verbs reach this host meanwhile).\n", s.URL())
	e, err := pickAuthExtension(ctx, h, extName)
	if err != nil {
		return errors.Join(err, stop())
	}
	st, err := s.BeginAuth(ctx, who, e, name)
	if err != nil {
		return errors.Join(err, stop())
	}
	a.printSignIn(who, name, st)
	res, err := s.WaitAuth(ctx, st.State)
	return errors.Join(a.signInResult(res, err), stop())
}

// pickAuthExtension resolves an empty extension name to the only
// extension with the auth capability.
func pickAuthExtension(ctx context.Context, c interface {
	Extensions(context.Context) ([]host.ExtensionInfo, error)
}, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	infos, err := c.Extensions(ctx)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range infos {
		for _, cp := range e.Capabilities {
			if cp == ext.CapabilityAuth {
				names = append(names, e.Name)
			}
		}
	}
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", fmt.Errorf("no extension of this host signs anybody in")
	}
	return "", usagef("--ext is required: extensions %v sign in", names)
}

func (a *app) printSignIn(who, name string, st *serve.AuthStart) {
	fmt.Fprintf(a.stdout, "To sign %s in to %s, open this URL in a browser:\n\n  %s\n\n", esc(displayOwner(who)), esc(name), esc(st.URL))
	fmt.Fprintf(a.stderr, "Waiting for the browser to come back (until %s; Ctrl-C to stop waiting)...\n", st.Expires.Local().Format(time.Kitchen))
}

func (a *app) signInResult(res *serve.AuthResult, err error) error {
	if err != nil {
		return err
	}
	if !res.OK {
		return errors.New(res.Message)
	}
	fmt.Fprintln(a.stdout, esc(res.Message))
	return nil
}
