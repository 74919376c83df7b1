package host_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/settings"
)

// TestBackupRestore backs up a data folder whose settings store is open
// (its writes in the WAL, as while the host serves) and whose secrets are
// in the encrypted file, and restores it onto an empty folder with a
// secrets file under another key: the settings, a user's file and every
// secret (a user's and the operator's, of an extension known only from the
// settings too) come back; a wrong passphrase and a non-empty folder are
// refused and write nothing.
func TestBackupRestore(t *testing.T) {
	ctx := context.Background()
	src := &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "file"}}
	st, err := settings.OpenSQLite(filepath.Join(src.DataDir, "settings.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Set(ctx, "mcp", "alice", "servers", []byte(`{"notes":true}`)); err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.OpenFile(filepath.Join(src.DataDir, "secrets.enc"), &secrets.FileOptions{KeyFile: filepath.Join(src.DataDir, "secrets.key")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[secrets.Key]string{
		{Extension: "mcp", User: "alice", Name: "token:notes"}:        "alice-secret\x00\xff",
		{Extension: "mcp", User: secrets.Operator, Name: "token:all"}: "operator-secret",
	}
	for k, v := range want {
		if err := sec.Set(ctx, k, secrets.NewValue(v)); err != nil {
			t.Fatal(err)
		}
	}
	_ = sec.Close()
	userFile := filepath.Join(src.DataDir, "users", "alice", "mcp", "state.json")
	if err := os.MkdirAll(filepath.Dir(userFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userFile, []byte(`{"x":1}`), 0o600); err != nil {
		t.Fatal(err)
	}

	const pass = "correct horse battery staple"
	var archive bytes.Buffer
	m, err := host.Backup(ctx, src, pass, &archive)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if m.Secrets != len(want) || m.Schemas["settings.db"] == 0 {
		t.Fatalf("manifest: %d secrets, schemas %v", m.Secrets, m.Schemas)
	}
	for v := range want {
		if bytes.Contains(archive.Bytes(), []byte(want[v])) {
			t.Fatalf("the archive holds a secret in clear")
		}
	}

	dst := &host.Config{DataDir: filepath.Join(t.TempDir(), "data"), Secrets: host.SecretsConfig{Backend: "file"}}
	if _, err := host.Restore(ctx, dst, "a wrong passphrase!", bytes.NewReader(archive.Bytes())); !errors.Is(err, host.ErrBackupKey) {
		t.Fatalf("Restore with a wrong passphrase: %v, want ErrBackupKey", err)
	}
	if _, err := os.Stat(dst.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a wrong passphrase wrote the data folder: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dst.DataDir)); len(ents) != 0 {
		t.Fatalf("a wrong passphrase left %v", ents)
	}
	if _, err := host.Restore(ctx, src, pass, bytes.NewReader(archive.Bytes())); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Restore onto a non-empty folder: %v", err)
	}
	if _, err := host.Restore(ctx, dst, pass, bytes.NewReader(archive.Bytes())); err != nil {
		t.Fatalf("Restore: %v", err)
	}

	st2, err := settings.OpenSQLite(filepath.Join(dst.DataDir, "settings.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if v, err := st2.Get(ctx, "mcp", "alice", "servers"); err != nil || string(v) != `{"notes":true}` {
		t.Fatalf("restored settings: %s, %v", v, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst.DataDir, "users", "alice", "mcp", "state.json")); err != nil || string(b) != `{"x":1}` {
		t.Fatalf("restored user file: %q, %v", b, err)
	}
	sec2, err := secrets.OpenFile(filepath.Join(dst.DataDir, "secrets.enc"), &secrets.FileOptions{KeyFile: filepath.Join(dst.DataDir, "secrets.key")})
	if err != nil {
		t.Fatal(err)
	}
	defer sec2.Close()
	for k, v := range want {
		got, err := sec2.Get(ctx, k)
		if err != nil || got.Reveal() != v {
			t.Fatalf("restored secret %q: %v", k.Name, err)
		}
	}
	if a, b := sha256File(t, filepath.Join(src.DataDir, "secrets.key")), sha256File(t, filepath.Join(dst.DataDir, "secrets.key")); a == b {
		t.Fatal("the restored secrets file has the backed-up folder's key")
	}
	for _, p := range []string{"settings.db", "users/alice/mcp/state.json"} {
		fi, err := os.Stat(filepath.Join(dst.DataDir, p))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", p, fi.Mode(), err)
		}
	}
}
