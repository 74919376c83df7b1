//go:build unix

package settings_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/settings"
)

// The file-mode rules exist only where Unix permissions do.

func TestSQLiteFileModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new", "dir")
	path := filepath.Join(dir, "settings.db")
	s := openSQLite(t, path)
	if err := s.Set(context.Background(), "e", "u", "s", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %04o, want %04o", p, got, want)
		}
	}
}

func TestSQLiteRefusesWritableFile(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]os.FileMode{"group": 0o620, "world": 0o602} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "settings.db")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			s, err := settings.OpenSQLite(path, nil)
			if err == nil {
				s.Close()
				t.Fatalf("OpenSQLite of a %04o file succeeded", mode)
			}
			if !strings.Contains(err.Error(), "group- or world-writable") || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q should name the file and the problem", err)
			}
		})
	}
	t.Run("NotAFile", func(t *testing.T) {
		t.Parallel()
		if _, err := settings.OpenSQLite(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("OpenSQLite of a folder = %v, want a 'not a regular file' error", err)
		}
	})
	t.Run("EmptyPath", func(t *testing.T) {
		t.Parallel()
		if _, err := settings.OpenSQLite("", nil); err == nil {
			t.Error("OpenSQLite(\"\") succeeded")
		}
	})
}
