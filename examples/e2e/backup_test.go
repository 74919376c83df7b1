package e2e_test

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBackupRestore (issue 18): `agenthost backup` of a serving host's
// data folder (a user with a token, settings, a secret in the encrypted
// file and an app's OAuth grant), restored with `agenthost restore` onto
// the empty data folder of another config: another folder with a new
// secrets key file, and another secrets backend (the OS keychain, a real
// gnome-keyring on a private bus). Served there, the token, the settings,
// the secret (notes whoami) and the grant (refresh) work. A wrong
// passphrase fails and writes nothing; the archive holds no secret in
// clear.
func TestBackupRestore(t *testing.T) {
	b := build(t)
	const pass = "backup passphrase 4c1d"
	src := fixtureEnv(t, b, "")
	src.startServe()
	f := makeFixture(t, src)
	archive := filepath.Join(t.TempDir(), "agenthost.backup")
	start := time.Now()
	if out := src.must(pass+"\n", "backup", "--out", archive); !strings.Contains(out, "1 secret(s)") {
		t.Errorf("backup: %s", out)
	}
	took := time.Since(start)
	src.stopServe()
	fi, err := os.Stat(archive)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the archive: %v %v, want mode 0600", fi, err)
	}
	t.Logf("backup of the serving host: %d bytes in %v (scrypt 2^18 included)", fi.Size(), took.Round(time.Millisecond))
	raw, _ := os.ReadFile(archive)
	for _, s := range []string{f.Secret, f.Token, "SQLite format"} {
		if strings.Contains(string(raw), s) {
			t.Fatalf("the archive holds %q in clear", s)
		}
	}

	// restore restores archive onto a new config with backend, serves it,
	// runs serving (when given) and checks the fixture there.
	restore := func(t *testing.T, archive, backend string, serving func(*env)) *env {
		dst := fixtureEnv(t, b, "")
		setBackend(t, dst, backend)
		data := filepath.Join(dst.dir, "data")
		if _, errOut, code := dst.run("a wrong passphrase\n", "restore", "--in", archive); code != 1 || !strings.Contains(errOut, "passphrase does not open") {
			t.Fatalf("restore with a wrong passphrase: exit %d %s", code, errOut)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("a restore with a wrong passphrase wrote the data folder: %v", err)
		}
		if out := dst.must(pass+"\n", "restore", "--in", archive); !strings.Contains(out, "1 secret(s)") {
			t.Errorf("restore: %s", out)
		}
		if _, errOut, code := dst.run(pass+"\n", "restore", "--in", archive); code != 1 || !strings.Contains(errOut, "not empty") {
			t.Errorf("a second restore onto the now full folder: exit %d %s", code, errOut)
		}
		dst.startServe()
		if serving != nil {
			serving(dst)
		}
		checkServed(t, dst, f)
		return dst
	}
	t.Run("file", func(t *testing.T) {
		dst := restore(t, archive, "file", nil)
		if a, b := sha256Of(t, filepath.Join(src.dir, "data", "secrets.key")), sha256Of(t, filepath.Join(dst.dir, "data", "secrets.key")); a == b {
			t.Error("the restored folder has the backed-up folder's secrets key")
		}
	})
	t.Run("keychain", func(t *testing.T) {
		startKeyring(t)
		// A backup of the keychain host while it serves (before the
		// check refreshes the grant, whose refresh token is then used)
		// takes the secret from the keychain; restored onto a file
		// config, everything works there too.
		again := filepath.Join(t.TempDir(), "from-keychain.backup")
		kc := restore(t, archive, "keychain", func(kc *env) {
			if out := kc.must(pass+"\n", "backup", "--out", again); !strings.Contains(out, "1 secret(s)") {
				t.Errorf("backup of the keychain host: %s", out)
			}
		})
		if _, err := os.Stat(filepath.Join(kc.dir, "data", "secrets.enc")); !os.IsNotExist(err) {
			t.Errorf("restored into the keychain, yet there is a secrets file: %v", err)
		}
		kc.stopServe()
		restore(t, again, "file", nil)
	})
}

// setBackend sets secrets.backend in e's config file.
func setBackend(t *testing.T, e *env, backend string) {
	t.Helper()
	raw, err := os.ReadFile(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["secrets"] = map[string]any{"backend": backend}
	raw, _ = json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(e.cfg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func sha256Of(t *testing.T, p string) string {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return string(sum[:])
}
