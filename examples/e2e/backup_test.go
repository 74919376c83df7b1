package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRestore (issue 18): `agenthost backup` of a serving host's
// data folder (a user with a token, settings, a secret in the encrypted
// file and an app's OAuth grant), restored with `agenthost restore` onto
// the empty data folder of another config (another folder, a new secrets
// key file): served there, the token, the settings, the secret (notes
// whoami) and the grant (refresh) work. A wrong passphrase fails and
// writes nothing; the archive holds no secret in clear.
func TestBackupRestore(t *testing.T) {
	b := build(t)
	const pass = "backup passphrase 4c1d"
	src := fixtureEnv(t, b, "")
	src.startServe()
	f := makeFixture(t, src)
	archive := filepath.Join(t.TempDir(), "agenthost.backup")
	if out := src.must(pass+"\n", "backup", "--out", archive); !strings.Contains(out, "1 secret(s)") {
		t.Errorf("backup: %s", out)
	}
	src.stopServe()
	fi, err := os.Stat(archive)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the archive: %v %v, want mode 0600", fi, err)
	}
	raw, _ := os.ReadFile(archive)
	for _, s := range []string{f.Secret, f.Token, "SQLite format"} {
		if strings.Contains(string(raw), s) {
			t.Fatalf("the archive holds %q in clear", s)
		}
	}

	dst := fixtureEnv(t, b, "")
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
	checkServed(t, dst, f)
}
