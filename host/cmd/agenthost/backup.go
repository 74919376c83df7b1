package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/control"
)

// readPassphrase reads the backup passphrase from the key file, or else
// the first line of stdin; never from argv.
func (a *app) readPassphrase(keyFile string) (string, error) {
	var raw []byte
	var err error
	from := "stdin"
	if keyFile != "" {
		from = keyFile
		raw, err = os.ReadFile(keyFile)
	} else {
		raw, err = io.ReadAll(io.LimitReader(a.stdin, 4<<10))
	}
	if err != nil {
		return "", fmt.Errorf("reading the backup passphrase from %s: %w", from, err)
	}
	p, _, _ := strings.Cut(string(raw), "\n")
	p = strings.TrimSuffix(p, "\r")
	if len(p) < 12 {
		return "", usagef("the backup passphrase from %s is shorter than 12 characters", from)
	}
	return p, nil
}

// archiveSetup checks the archive flag (named flag, value path), then
// reads the passphrase and loads the config, as backup and restore both
// begin.
func (a *app) archiveSetup(flag, path, keyFile string) (string, *host.Config, error) {
	if path == "" {
		return "", nil, usagef("%s is required", flag)
	}
	pass, err := a.readPassphrase(keyFile)
	if err != nil {
		return "", nil, err
	}
	cfg, err := host.LoadConfig(a.configPath)
	if err != nil {
		return "", nil, err
	}
	return pass, cfg, nil
}

func (a *app) backupCmd() *cobra.Command {
	var out, keyFile string
	cmd := &cobra.Command{
		Use:   "backup --out FILE [--key-file F] < passphrase",
		Short: "Write one encrypted archive of everything the host keeps (databases, user folders, every secret of its backend); works while the host serves",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			pass, cfg, err := a.archiveSetup("--out", out, keyFile)
			if err != nil {
				return err
			}
			out, err = filepath.Abs(out)
			if err != nil {
				return err
			}
			// Written beside, renamed into place when complete.
			f, err := os.CreateTemp(filepath.Dir(out), ".agenthost-backup-*")
			if err != nil {
				return fmt.Errorf("creating the backup: %w", err)
			}
			defer func() {
				if err != nil {
					_ = f.Close()
					_ = os.Remove(f.Name())
				}
			}()
			m, err := host.Backup(cmd.Context(), cfg, pass, f)
			if err != nil {
				return err
			}
			if err := errors.Join(f.Sync(), f.Close()); err != nil {
				return fmt.Errorf("writing the backup %s: %w", out, err)
			}
			if err := os.Rename(f.Name(), out); err != nil {
				return fmt.Errorf("writing the backup %s: %w", out, err)
			}
			fmt.Fprintf(a.stdout, "wrote %s: %d file(s), %d secret(s), format %d\n", esc(out), len(m.Files)-1, m.Secrets, m.Format)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "the archive to write (mode 0600)")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "read the passphrase from this file's first line instead of stdin")
	return cmd
}

func (a *app) restoreCmd() *cobra.Command {
	var in, keyFile string
	cmd := &cobra.Command{
		Use:   "restore --in FILE [--key-file F] < passphrase",
		Short: "Restore an archive of `agenthost backup` onto the config's empty data folder, its secrets into the config's secrets backend",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			pass, cfg, err := a.archiveSetup("--in", in, keyFile)
			if err != nil {
				return err
			}
			if c, err := control.Dial(cmd.Context(), cfg.DataPath()); err == nil {
				c.Close()
				return fmt.Errorf("a host is serving the data folder %s: stop it before a restore", cfg.DataPath())
			}
			f, err := os.Open(in)
			if err != nil {
				return fmt.Errorf("opening the backup: %w", err)
			}
			defer f.Close()
			m, err := host.Restore(cmd.Context(), cfg, pass, f)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "restored %d file(s) and %d secret(s) from agenthost %s's backup of %s into %s\n",
				len(m.Files)-1, m.Secrets, esc(m.Version), m.Created.Format("2006-01-02 15:04:05Z"), esc(cfg.DataPath()))
			return nil
		},
	}
	cmd.Flags().StringVarP(&in, "in", "i", "", "the archive to restore")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "read the passphrase from this file's first line instead of stdin")
	return cmd
}
