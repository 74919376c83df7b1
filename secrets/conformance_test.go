package secrets_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/secrets/secretstest"
	"github.com/zalando/go-keyring"
)

func TestMemoryConformance(t *testing.T) {
	secretstest.Run(t, func(t *testing.T) secrets.Store { return secrets.NewMemory() })
}

func TestFileConformance(t *testing.T) {
	secretstest.Run(t, func(t *testing.T) secrets.Store {
		f, err := secrets.OpenFile(filepath.Join(t.TempDir(), "store", "secrets.enc"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

func TestKeychainFakeConformance(t *testing.T) {
	secretstest.Run(t, func(t *testing.T) secrets.Store {
		kc, err := secrets.NewKeychainWithFake(nil, secrets.NewFakeKeyring())
		if err != nil {
			t.Fatal(err)
		}
		return kc
	})
}

// TestKeychainConformance runs the suite against the real Secret Service
// (gnome-keyring on the private bus that TestMain started).
func TestKeychainConformance(t *testing.T) {
	requireRealKeychain(t)
	secretstest.Run(t, func(t *testing.T) secrets.Store {
		return openRealKeychain(t)
	})
}

// openRealKeychain returns a Keychain on the real Secret Service with a
// service name of its own, whose items are all deleted when the test ends.
func openRealKeychain(t testing.TB) *secrets.Keychain {
	t.Helper()
	requireRealKeychain(t)
	service := uniqueService()
	kc, err := secrets.NewKeychain(&secrets.KeychainOptions{Service: service, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := keyring.DeleteAll(service); err != nil {
			t.Errorf("cleaning up keychain service %s: %v", service, err)
		}
	})
	return kc
}
