package secrets_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/secrets/internal/testbus"
	"github.com/agenthost/agenthost/secrets/secretstest"
)

func TestKeychainProbeReal(t *testing.T) {
	kc := openRealKeychain(t)
	if err := kc.Probe(t.Context()); err != nil {
		t.Fatalf("Probe on a running, unlocked gnome-keyring: %v", err)
	}
}

// startBusOrSkip starts a private bus for one test. It skips (laptop) or
// fails (CI) when testbus cannot start what the test needs.
func startBusOrSkip(t *testing.T, opts testbus.Options) *testbus.Bus {
	t.Helper()
	bus, err := testbus.Start(opts)
	switch {
	case errors.Is(err, testbus.ErrMissing) && os.Getenv("CI") == "true":
		t.Fatalf("CI=true and the test cannot run: %v", err)
	case errors.Is(err, testbus.ErrMissing):
		t.Skipf("SKIPPED: a real Secret Service needs dbus-daemon and gnome-keyring-daemon (apt-get install dbus-daemon gnome-keyring): %v; under CI=true this fails", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bus.Close(); err != nil {
			t.Errorf("stopping the bus: %v", err)
		}
	})
	return bus
}

// runProbeHelper runs the test binary as a fresh process (so godbus has no
// cached connection) with exactly env, and returns what its Probe, Set and
// Get reported.
func runProbeHelper(t *testing.T, env []string) (map[string]helperResult, string) {
	t.Helper()
	canary := secretstest.Canary("helper")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(env, helperEnv+"=keychain-probe", "HELPER_CANARY="+canary)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stdout.String()+stderr.String(), canary) {
		t.Errorf("the helper's output contains the secret value: %s %s", stdout.String(), stderr.String())
	}
	var out map[string]helperResult
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("helper output %q: %v", stdout.String(), err)
	}
	return out, stdout.String()
}

// TestKeychainUnavailable is SECURITY.md E1: without a usable Secret
// Service every call fails fast with ErrUnavailable (never ErrNotFound),
// with a message that says what to do, and no bus is ever autolaunched.
func TestKeychainUnavailable(t *testing.T) {
	t.Parallel()
	// A dbus-launch that records being run: godbus would run it to
	// autolaunch a bus if DBUS_SESSION_BUS_ADDRESS were empty.
	bin := t.TempDir()
	marker := filepath.Join(bin, "dbus-launch-was-run")
	script := "#!/bin/sh\ntouch " + marker + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "dbus-launch"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	base := []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + home, "XDG_RUNTIME_DIR=" + home}

	cases := map[string]struct {
		bus     func(t *testing.T) string // the DBUS_SESSION_BUS_ADDRESS, "" for none
		message string
	}{
		"no bus address": {
			bus:     func(*testing.T) string { return "" },
			message: "DBUS_SESSION_BUS_ADDRESS is not set",
		},
		"dead socket": {
			bus:     func(t *testing.T) string { return "unix:path=" + filepath.Join(t.TempDir(), "no-such-bus") },
			message: "cannot reach the D-Bus session bus",
		},
		"bus without a Secret Service": {
			bus:     func(t *testing.T) string { return startBusOrSkip(t, testbus.Options{}).Address },
			message: "no Secret Service on the session bus: install and start gnome-keyring",
		},
		"keyring never unlocked": {
			bus:     func(t *testing.T) string { return startBusOrSkip(t, testbus.Options{Keyring: true}).Address },
			message: "locked or has no default collection",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := base
			if addr := tc.bus(t); addr != "" {
				env = append(env, "DBUS_SESSION_BUS_ADDRESS="+addr)
			}
			start := time.Now()
			out, raw := runProbeHelper(t, env)
			for _, call := range []string{"probe", "set", "get"} {
				r := out[call]
				if !r.Unavailable || r.NotFound || r.Invalid {
					t.Errorf("%s: %+v; want ErrUnavailable only", call, r)
				}
				if !strings.Contains(r.Err, tc.message) || !strings.Contains(r.Err, "encrypted file store") {
					t.Errorf("%s: error %q; want it to say %q and point to the encrypted file store", call, r.Err, tc.message)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("failing took %v; want it fast (output %s)", d, raw)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("dbus-launch was run: a session bus was autolaunched")
			}
		})
	}
}

// TestFileKeyInKeychain keeps the encrypted file's key in the real
// keychain instead of a key file.
func TestFileKeyInKeychain(t *testing.T) {
	kc := openRealKeychain(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.enc")
	f, err := secrets.OpenFile(path, &secrets.FileOptions{Keychain: kc})
	if err != nil {
		t.Fatal(err)
	}
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "token"}
	canary := secretstest.Canary("alice")
	if err := f.Set(t.Context(), k, secrets.NewValue(canary)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".key"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key file was written next to the store (%v); the key belongs in the keychain", err)
	}
	f, err = secrets.OpenFile(path, &secrets.FileOptions{Keychain: kc})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := f.Get(t.Context(), k)
	if err != nil || got.Reveal() != canary {
		t.Fatalf("Get after reopening: %v", err)
	}
	// The key lives in the keychain's own namespace: the secrets API
	// neither lists nor deletes it.
	if err := kc.DeleteUser(t.Context(), secrets.Operator); err != nil {
		t.Fatal(err)
	}
	if f2, err := secrets.OpenFile(path, &secrets.FileOptions{Keychain: kc}); err != nil {
		t.Fatalf("reopening after DeleteUser(Operator): %v", err)
	} else {
		_ = f2.Close()
	}
	// Another service holds no key for this store.
	other := openRealKeychain(t)
	_, err = secrets.OpenFile(path, &secrets.FileOptions{Keychain: other})
	if !errors.Is(err, secrets.ErrUnavailable) || !strings.Contains(err.Error(), "holds no key") || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenFile with a keychain lacking the key: %v; want ErrUnavailable naming the path", err)
	}
}
