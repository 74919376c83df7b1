package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
)

// passphraseCost is the bcrypt cost of a passphrase hash: about a quarter
// of a second per check on a small machine, which the sign-in lockout
// bounds further.
const passphraseCost = 12

func (a *app) oauthCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "oauth", Short: "Helpers for the OAuth authorization server (apps connecting to /mcp)", Args: exactArgs(0)}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	hash := &cobra.Command{
		Use:   "hash-passphrase < passphrase",
		Short: "Print the bcrypt hash of a passphrase read from stdin, for oauth.passphraseHash",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			raw, err := io.ReadAll(io.LimitReader(a.stdin, 1<<10))
			if err != nil {
				return fmt.Errorf("reading the passphrase from stdin: %w", err)
			}
			p := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
			switch {
			case len(p) < 12:
				return usagef("the passphrase on stdin is shorter than 12 characters")
			case len(p) > 72:
				return usagef("the passphrase on stdin is longer than 72 bytes (bcrypt's limit)")
			}
			h, err := bcrypt.GenerateFromPassword([]byte(p), passphraseCost)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, string(h))
			return nil
		},
	}
	cmd.AddCommand(hash)
	return cmd
}
