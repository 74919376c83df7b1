package host_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

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
	host.SetScryptWorkFactor(t, 12)
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

// TestRestoreRefuses: an archive of a newer format, one whose file does
// not match its manifest's SHA-256, one with a path out of the data folder
// and one without a manifest are refused with a clear error, and the data
// folder is not written.
func TestRestoreRefuses(t *testing.T) {
	const pass = "correct horse battery staple"
	type file struct{ name, body string }
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	archive := func(m *host.BackupManifest, files ...file) []byte {
		var buf bytes.Buffer
		r, err := age.NewScryptRecipient(pass)
		if err != nil {
			t.Fatal(err)
		}
		r.SetWorkFactor(10)
		enc, _ := age.Encrypt(&buf, r)
		gz := gzip.NewWriter(enc)
		tw := tar.NewWriter(gz)
		if m != nil {
			mj, _ := json.Marshal(m)
			files = append([]file{{"manifest.json", string(mj)}}, files...)
		}
		for _, f := range files {
			_ = tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
			_, _ = tw.Write([]byte(f.body))
		}
		if err := errors.Join(tw.Close(), gz.Close(), enc.Close()); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	secs := file{"secrets.json", "[]"}
	manifest := func(format int, files ...host.BackupFile) *host.BackupManifest {
		return &host.BackupManifest{Format: format, Version: "v9.9.9", Files: append(files, host.BackupFile{Name: "secrets.json", Size: 2, SHA256: sum("[]")})}
	}
	for _, c := range []struct {
		name, want string
		archive    []byte
	}{
		{"newer format", "format 2, written by agenthost v9.9.9", archive(manifest(host.BackupFormat+1), secs)},
		{"hash mismatch", "settings.db does not match its SHA-256", archive(
			manifest(1, host.BackupFile{Name: "settings.db", Size: 5, SHA256: sum("other")}), secs, file{"data/settings.db", "hello"})},
		{"path escape", "leaves the data folder", archive(manifest(1), secs, file{"data/../evil", "x"})},
		{"no manifest", "the manifest is not first", archive(nil, secs)},
		{"not in manifest", "x is not in the manifest", archive(manifest(1), secs, file{"data/x", "x"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := &host.Config{DataDir: filepath.Join(t.TempDir(), "data"), Secrets: host.SecretsConfig{Backend: "file"}}
			_, err := host.Restore(context.Background(), dst, pass, bytes.NewReader(c.archive))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v, want %q", err, c.want)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst.DataDir)); len(ents) != 0 {
				t.Fatalf("a refused restore left %v", ents)
			}
		})
	}
}
