package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/settings"
)

// OperatorUser is the user ID under which an extension keeps the
// operator's own secrets (for instance a shared server's credential) in
// its [ext.UserStore]. No real user can have it: user IDs start with a
// letter or digit. The host maps it to [secrets.Operator].
const OperatorUser = api.OperatorUser

// openStores opens the settings and secrets stores the config and options
// ask for: SQLite under the data folder; the OS keychain when reachable,
// else the encrypted file.
func openStores(ctx context.Context, cfg *Config, o *Options, dataDir string) (settings.Store, secrets.Store, string, error) {
	st := o.Settings
	if st == nil {
		s, err := settings.OpenSQLite(filepath.Join(dataDir, "settings.db"), nil)
		if err != nil {
			return nil, nil, "", fmt.Errorf("opening the settings store: %w", err)
		}
		st = s
	}
	if o.Secrets != nil {
		return st, o.Secrets, "custom", nil
	}
	sec, kind, err := openSecrets(ctx, cfg.Secrets.Backend, dataDir)
	if err != nil {
		if o.Settings == nil {
			_ = st.Close()
		}
		return nil, nil, "", err
	}
	return st, sec, kind, nil
}

func openSecrets(ctx context.Context, backend, dataDir string) (secrets.Store, string, error) {
	file := func() (secrets.Store, string, error) {
		f, err := secrets.OpenFile(filepath.Join(dataDir, "secrets.enc"), &secrets.FileOptions{KeyFile: filepath.Join(dataDir, "secrets.key")})
		if err != nil {
			return nil, "", fmt.Errorf("opening the encrypted secrets file: %w", err)
		}
		return f, "file", nil
	}
	switch backend {
	case "memory":
		return secrets.NewMemory(), "memory", nil
	case "file":
		return file()
	case "keychain", "", "auto":
		k, err := secrets.NewKeychain(nil)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 5e9)
			err = k.Probe(pctx)
			cancel()
			if err == nil {
				return k, "keychain", nil
			}
			_ = k.Close()
		}
		if backend == "keychain" {
			return nil, "", fmt.Errorf("secrets.backend is keychain but the OS keychain is unreachable: %w", err)
		}
		return file()
	}
	return nil, "", fmt.Errorf("unknown secrets backend %q", backend)
}

// secretKey maps an extension's view (user, name) to the store's key.
func secretKey(extName, user, name string) secrets.Key {
	if user == OperatorUser {
		user = secrets.Operator
	}
	return secrets.Key{Extension: extName, User: user, Name: name}
}

// mapSecretErr maps the secrets module's sentinels to the contract's.
func mapSecretErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, secrets.ErrNotFound):
		return ext.Mark(err, ext.ErrNotFound)
	case errors.Is(err, secrets.ErrInvalid):
		return ext.Mark(err, ext.ErrInvalidArgument)
	case errors.Is(err, secrets.ErrUnavailable):
		return ext.Mark(err, ext.ErrUnavailable)
	}
	return err
}

func mapSettingsErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, settings.ErrInvalid):
		return ext.Mark(err, ext.ErrInvalidArgument)
	case errors.Is(err, settings.ErrClosed):
		return ext.Mark(err, ext.ErrUnavailable)
	}
	return err
}
