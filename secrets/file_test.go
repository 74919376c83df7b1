package secrets_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/secrets/secretstest"
	"github.com/google/go-cmp/cmp"
)

var fileKey = secrets.Key{Extension: "mcp", User: "alice", Name: "token:github"}

// newFileStore creates a store with one secret in a fresh directory and
// closes it; it returns the store's path and the secret.
func newFileStore(t *testing.T) (path, canary string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "data", "secrets.enc")
	f, err := secrets.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	canary = secretstest.Canary("alice")
	if err := f.Set(t.Context(), fileKey, secrets.NewValue(canary)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, canary
}

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestFileCreatesPrivateFiles(t *testing.T) {
	t.Parallel()
	path, canary := newFileStore(t)
	got := map[string]fs.FileMode{}
	for _, p := range []string{filepath.Dir(path), path, path + ".key", path + ".lock"} {
		got[p] = perm(t, p)
	}
	want := map[string]fs.FileMode{filepath.Dir(path): 0o700, path: 0o600, path + ".key": 0o600, path + ".lock": 0o600}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("modes mismatch (-want +got):\n%s", diff)
	}
	// The key is 32 random bytes; the store holds neither the secret nor
	// the key names in the clear, and no temporary file is left behind.
	key, err := os.ReadFile(path + ".key")
	if err != nil || len(key) != 32 {
		t.Errorf("key file: %d bytes, %v; want 32", len(key), err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, plain := range []string{canary, fileKey.Name, fileKey.User, "users"} {
		if bytes.Contains(raw, []byte(plain)) {
			t.Errorf("the store file contains %q in the clear", plain)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"secrets.enc", "secrets.enc.key", "secrets.enc.lock"}, names); diff != "" {
		t.Errorf("directory entries mismatch (-want +got):\n%s", diff)
	}
}

func TestFileReopen(t *testing.T) {
	t.Parallel()
	path, canary := newFileStore(t)
	f := reopen(t, path)
	v, err := f.Get(t.Context(), fileKey)
	if err != nil || v.Reveal() != canary {
		t.Fatalf("Get after reopening: %v", err)
	}
}

func TestFileFreshNonceEveryWrite(t *testing.T) {
	t.Parallel()
	path, canary := newFileStore(t)
	f := reopen(t, path)
	seen := map[string]bool{}
	for range 5 {
		if err := f.Set(t.Context(), fileKey, secrets.NewValue(canary)); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		nonce := string(raw[17:29])
		if seen[nonce] {
			t.Fatal("a nonce was reused for the same plaintext")
		}
		seen[nonce] = true
	}
}

func TestFileRefusesInsecurePermissions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		chmod   func(path string) string // returns the path named in the error
		message string
	}{
		"group-readable key file": {func(p string) string { return chmod(p+".key", 0o640) }, "key file"},
		"world-readable key file": {func(p string) string { return chmod(p+".key", 0o604) }, "key file"},
		"group-readable store":    {func(p string) string { return chmod(p, 0o640) }, "store file"},
		"world-writable store":    {func(p string) string { return chmod(p, 0o602) }, "store file"},
		"group-writable dir":      {func(p string) string { return chmod(filepath.Dir(p), 0o770) }, "directory"},
		"world-writable dir":      {func(p string) string { return chmod(filepath.Dir(p), 0o707) }, "directory"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path, canary := newFileStore(t)
			named := tc.chmod(path)
			_, err := secrets.OpenFile(path, nil)
			if !errors.Is(err, secrets.ErrUnavailable) {
				t.Fatalf("OpenFile: %v; want ErrUnavailable", err)
			}
			for _, want := range []string{named, tc.message, "chmod"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("error contains the secret")
			}
		})
	}
	// A group-readable (not writable) directory is fine: what matters is
	// who can replace files in it.
	path, _ := newFileStore(t)
	chmod(filepath.Dir(path), 0o750)
	f, err := secrets.OpenFile(path, nil)
	if err != nil {
		t.Fatalf("OpenFile in a 0750 directory: %v", err)
	}
	_ = f.Close()
}

func chmod(path string, mode fs.FileMode) string {
	if err := os.Chmod(path, mode); err != nil {
		panic(err)
	}
	return path
}

// TestFileCorrupt: a damaged store is an error naming the path, never an
// empty store.
func TestFileCorrupt(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		damage  func(b []byte) []byte
		message string
	}{
		"empty":              {func([]byte) []byte { return nil }, "truncated or corrupt"},
		"10 bytes":           {func(b []byte) []byte { return b[:10] }, "truncated or corrupt"},
		"header only":        {func(b []byte) []byte { return b[:29] }, "truncated or corrupt"},
		"cut short":          {func(b []byte) []byte { return b[:len(b)-1] }, "failed authentication"},
		"appended byte":      {func(b []byte) []byte { return append(b, 0) }, "failed authentication"},
		"flipped ciphertext": {func(b []byte) []byte { b[40] ^= 1; return b }, "failed authentication"},
		"flipped tag":        {func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, "failed authentication"},
		"flipped nonce":      {func(b []byte) []byte { b[20] ^= 1; return b }, "failed authentication"},
		"other magic":        {func(b []byte) []byte { copy(b, "NOTSECRT"); return b }, "not an agenthost secrets store"},
		"plain JSON":         {func([]byte) []byte { return []byte(`{"version":1,"users":{}}` + strings.Repeat(" ", 40)) }, "not an agenthost secrets store"},
		"newer version":      {func(b []byte) []byte { b[8] = 2; return b }, "format version 2"},
		"key ID changed":     {func(b []byte) []byte { b[9] ^= 1; return b }, "wrong key"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path, canary := newFileStore(t)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = secrets.OpenFile(path, nil)
			if !errors.Is(err, secrets.ErrUnavailable) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("OpenFile of a damaged store: %v; want ErrUnavailable naming %s and saying %q", err, path, tc.message)
			}
			if strings.Contains(err.Error(), canary) {
				t.Error("error contains the secret")
			}
		})
	}
}

// TestFileCorruptWhileOpen: damage done by another writer after OpenFile
// shows up on the next call as an error, not as an empty store.
func TestFileCorruptWhileOpen(t *testing.T) {
	t.Parallel()
	path, _ := newFileStore(t)
	f := reopen(t, path)
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Get(t.Context(), fileKey); !errors.Is(err, secrets.ErrUnavailable) || errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("Get: %v; want ErrUnavailable", err)
	}
	if _, err := f.List(t.Context(), "mcp", "alice"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("List: %v; want ErrUnavailable", err)
	}
	if err := f.Set(t.Context(), fileKey, secrets.NewValue("x")); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("Set over a corrupt store: %v; want ErrUnavailable (never overwrite what cannot be read)", err)
	}
}

func TestFileWrongOrMissingKey(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		change  func(keyPath string)
		message string
	}{
		"other key":    {func(p string) { mustWrite(p, bytes.Repeat([]byte{7}, 32)) }, "wrong key"},
		"short key":    {func(p string) { mustWrite(p, []byte("short")) }, "exactly 32 bytes"},
		"long key":     {func(p string) { mustWrite(p, bytes.Repeat([]byte{7}, 33)) }, "exactly 32 bytes"},
		"key missing":  {func(p string) { _ = os.Remove(p) }, "missing but the store exists"},
		"key is a dir": {func(p string) { _ = os.Remove(p); _ = os.Mkdir(p, 0o700) }, "not a regular file"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path, _ := newFileStore(t)
			tc.change(path + ".key")
			_, err := secrets.OpenFile(path, nil)
			if !errors.Is(err, secrets.ErrUnavailable) || !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), path) {
				t.Fatalf("OpenFile: %v; want ErrUnavailable naming the path and saying %q", err, tc.message)
			}
			// The store is untouched: the right key still opens it.
		})
	}
}

func mustWrite(path string, b []byte) {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		panic(err)
	}
}

func TestFileKeyFileOption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "keys", "store.key")
	path := filepath.Join(dir, "data", "secrets.enc")
	f, err := secrets.OpenFile(path, &secrets.FileOptions{KeyFile: keyPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Set(t.Context(), fileKey, secrets.NewValue("v")); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if got := perm(t, keyPath); got != 0o600 {
		t.Errorf("key file mode %04o, want 0600", got)
	}
	if _, err := os.Stat(path + ".key"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a default key file was created too: %v", err)
	}
	// Without the option the default key file is missing.
	if _, err := secrets.OpenFile(path, nil); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("OpenFile without KeyFile: %v; want the missing key reported", err)
	}
}

func TestOpenFileInvalidArguments(t *testing.T) {
	t.Parallel()
	kc, err := secrets.NewKeychainWithFake(nil, secrets.NewFakeKeyring())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		path string
		opts *secrets.FileOptions
	}{
		"empty path": {"", nil},
		"two keys":   {filepath.Join(t.TempDir(), "s"), &secrets.FileOptions{KeyFile: "k", Keychain: kc}},
	} {
		if _, err := secrets.OpenFile(tc.path, tc.opts); !errors.Is(err, secrets.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A path under a regular file cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	mustWrite(file, nil)
	if _, err := secrets.OpenFile(filepath.Join(file, "secrets.enc"), nil); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("store under a regular file: %v, want ErrUnavailable", err)
	}
}

// TestFileKeyInFakeKeychain covers the keychain-held key without a real
// Secret Service; TestFileKeyInKeychain does the same against gnome-keyring.
func TestFileKeyInFakeKeychain(t *testing.T) {
	t.Parallel()
	fake := secrets.NewFakeKeyring()
	kc, err := secrets.NewKeychainWithFake(&secrets.KeychainOptions{Service: "svc"}, fake)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "secrets.enc")
	f, err := secrets.OpenFile(path, &secrets.FileOptions{Keychain: kc})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Set(t.Context(), fileKey, secrets.NewValue("v")); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if diff := cmp.Diff([]string{"f/" + strings.ReplaceAll(path, "/", "%2F")}, fake.Accounts("svc")); diff != "" {
		t.Errorf("keychain items mismatch (-want +got):\n%s", diff)
	}
	// A different key in the keychain is a wrong key.
	if err := fake.Set("svc", fake.Accounts("svc")[0], "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.OpenFile(path, &secrets.FileOptions{Keychain: kc}); err == nil || !strings.Contains(err.Error(), "wrong key") ||
		!strings.Contains(err.Error(), "the keychain") {
		t.Errorf("OpenFile with a different key in the keychain: %v; want a wrong-key error", err)
	}
}

// TestFileTwoHandles: two Files on one path (separate lock descriptors,
// as in two processes) serialize their writes and see each other's.
func TestFileTwoHandles(t *testing.T) {
	t.Parallel()
	path, _ := newFileStore(t)
	a, err := secrets.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := secrets.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var wg sync.WaitGroup
	var want []string
	for i := range 20 {
		for j, f := range []*secrets.File{a, b} {
			name := fmt.Sprintf("h%d-%02d", j, i)
			want = append(want, name)
			wg.Go(func() {
				if err := f.Set(t.Context(), secrets.Key{Extension: "x", User: "alice", Name: name}, secrets.NewValue(name)); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	slices.Sort(want)
	for _, f := range []*secrets.File{a, b} {
		got, err := f.List(t.Context(), "x", "alice")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("List mismatch (-want +got):\n%s", diff)
		}
	}
}

// TestFileTwoProcesses: a second process writes the same store while this
// one does; flock serializes them and no write is lost.
func TestFileTwoProcesses(t *testing.T) {
	t.Parallel()
	path, _ := newFileStore(t)
	const helperN, ownN = 150, 50
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=file-writer", "HELPER_PATH="+path, fmt.Sprintf("HELPER_N=%d", helperN))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := reopen(t, path)
	// Start writing once the helper has, so that the writes interleave.
	for {
		names, err := f.List(t.Context(), "x", "alice")
		if err != nil {
			t.Fatal(err)
		}
		if len(names) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var want []string
	for i := range helperN {
		want = append(want, fmt.Sprintf("w%03d", i))
	}
	interleaved := false
	for i := range ownN {
		name := fmt.Sprintf("t%03d", i)
		want = append(want, name)
		if err := f.Set(t.Context(), secrets.Key{Extension: "x", User: "alice", Name: name}, secrets.NewValue("from the test")); err != nil {
			t.Fatal(err)
		}
		if names, _ := f.List(t.Context(), "x", "alice"); len(names) < helperN+i+1 {
			interleaved = true
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v: %s", err, stderr.String())
	}
	slices.Sort(want)
	got, err := f.List(t.Context(), "x", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List mismatch (-want +got):\n%s", diff)
	}
	t.Logf("writes interleaved with the other process: %v", interleaved)
}

// reopen opens the store at path for the rest of the test.
func reopen(t *testing.T, path string) *secrets.File {
	t.Helper()
	f, err := secrets.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}
