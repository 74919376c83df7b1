package secrets

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dbus "github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/zalando/go-keyring"
	"pgregory.net/rapid"
)

var testKey = Key{Extension: "mcp", User: "alice", Name: "token:github"}

// waitIdle waits until no mutation holds the write semaphore and no
// keychain call is in flight, abandoned ones included.
func waitIdle(t testing.TB, k *Keychain) {
	t.Helper()
	select {
	case k.writing <- struct{}{}:
		<-k.writing
	case <-time.After(10 * time.Second):
		t.Fatal("the write semaphore was not released")
	}
	for deadline := time.Now().Add(10 * time.Second); len(k.calls) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("keychain calls still in flight")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeychainErrorMapping(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err     error
		set     bool // fail Set instead of Get
		want    error
		message string
	}{
		"not found":             {err: keyring.ErrNotFound, want: ErrNotFound},
		"no secret service":     {err: dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown"}, want: ErrUnavailable, message: "no Secret Service on the session bus: install and start gnome-keyring"},
		"no secret service (*)": {err: &dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown"}, want: ErrUnavailable, message: "no Secret Service"},
		"no reply":              {err: dbus.Error{Name: "org.freedesktop.DBus.Error.NoReply"}, want: ErrUnavailable, message: "did not reply"},
		"other D-Bus error":     {err: dbus.Error{Name: "org.freedesktop.Secret.Error.IsLocked"}, want: ErrUnavailable, message: "Secret Service failed"},
		"locked":                {err: errors.New("failed to unlock correct collection '/org/freedesktop/secrets/aliases/default'"), want: ErrUnavailable, message: "locked or has no default collection"},
		"dead socket":           {err: &net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}, want: ErrUnavailable, message: "cannot reach the D-Bus session bus"},
		"auth failed":           {err: errors.New("dbus: authentication failed"), want: ErrUnavailable, message: "cannot reach the D-Bus session bus"},
		"unsupported platform":  {err: keyring.ErrUnsupportedPlatform, want: ErrUnavailable, message: "supports no keychain"},
		"too big":               {err: keyring.ErrSetDataTooBig, set: true, want: ErrInvalid, message: "too big"},
		"anything else":         {err: errors.New("weird"), want: ErrUnavailable, message: "the keychain failed: weird"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := NewFakeKeyring()
			fake.Hook = func(op, account, _ string) error {
				if tc.set == (op == "set") && strings.HasPrefix(account, "s/") {
					return tc.err
				}
				return nil
			}
			k, err := NewKeychainWithFake(nil, fake)
			if err != nil {
				t.Fatal(err)
			}
			if tc.set {
				err = k.Set(t.Context(), testKey, NewValue("v"))
			} else {
				_, err = k.Get(t.Context(), testKey)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			for _, other := range []error{ErrNotFound, ErrUnavailable, ErrInvalid} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("error %v also wraps %v", err, other)
				}
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not say %q", err, tc.message)
			}
			if !strings.Contains(err.Error(), `"token:github"`) {
				t.Errorf("error %q does not name the key", err)
			}
		})
	}
}

func TestKeychainTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := NewFakeKeyring()
	fake.Hook = func(string, string, string) error { <-release; return nil }
	k, err := NewKeychainWithFake(&KeychainOptions{Timeout: 50 * time.Millisecond}, fake)
	if err != nil {
		t.Fatal(err)
	}
	defer waitIdle(t, k)
	defer close(release)
	start := time.Now()
	_, err = k.Get(t.Context(), testKey)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want ErrUnavailable and context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "did not answer within 50ms") || !strings.Contains(err.Error(), "unlock") {
		t.Errorf("error %q does not explain the timeout", err)
	}
	if elapsed > 2*time.Second {
		t.Errorf("Get took %v with a 50ms timeout", elapsed)
	}
	if err := k.Probe(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Probe of a hung keychain: %v, want ErrUnavailable", err)
	}
}

func TestKeychainCallerCancel(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := NewFakeKeyring()
	fake.Hook = func(string, string, string) error { <-release; return nil }
	k, err := NewKeychainWithFake(nil, fake)
	if err != nil {
		t.Fatal(err)
	}
	defer waitIdle(t, k)
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err = k.Get(ctx, testKey)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want the caller's context.DeadlineExceeded and not ErrUnavailable", err)
	}
}

// TestKeychainAbandonedWriteHoldsLock: a write abandoned after a timeout
// keeps the write semaphore until it lands, so a later Delete cannot run
// before it and be undone by it.
func TestKeychainAbandonedWriteHoldsLock(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	fake := NewFakeKeyring()
	fake.Hook = func(op, account, _ string) error {
		if op == "set" && strings.HasPrefix(account, "s/") {
			<-release
		}
		return nil
	}
	k, err := NewKeychainWithFake(&KeychainOptions{Timeout: 50 * time.Millisecond}, fake)
	if err != nil {
		t.Fatal(err)
	}
	defer waitIdle(t, k)
	defer once.Do(func() { close(release) })
	if err := k.Set(t.Context(), testKey, NewValue("v")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Set: %v, want ErrUnavailable (timeout)", err)
	}
	err = k.Delete(t.Context(), testKey)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "earlier keychain write") {
		t.Fatalf("Delete while the abandoned Set is pending: %v, want ErrUnavailable naming the earlier write", err)
	}
	once.Do(func() { close(release) })
	waitIdle(t, k)
	if err := k.Delete(t.Context(), testKey); err != nil {
		t.Fatalf("Delete after the Set landed: %v", err)
	}
	if got := fake.Accounts(k.Service()); len(got) != 0 {
		t.Errorf("items left after Delete: %q", got)
	}
}

func TestKeychainPanicBecomesError(t *testing.T) {
	t.Parallel()
	fake := NewFakeKeyring()
	fake.Hook = func(string, string, string) error {
		var body []any
		_ = body[0].(bool) // what go-keyring's handlePrompt does with a malformed signal
		return nil
	}
	k, err := NewKeychainWithFake(nil, fake)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Get(t.Context(), testKey)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("error = %v, want ErrUnavailable saying the library panicked", err)
	}
}

func TestKeychainScrubsSecretFromErrors(t *testing.T) {
	t.Parallel()
	const secret = "CANARY-scrub-0123456789abcdef"
	for name, backendErr := range map[string]func(string) error{
		"plain":     func(s string) error { return fmt.Errorf("refused item with secret %s", s) },
		"too big":   func(s string) error { return fmt.Errorf("%w: %s", keyring.ErrSetDataTooBig, s) },
		"dbus body": func(s string) error { return dbus.Error{Name: "org.example.Error", Body: []any{s}} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := NewFakeKeyring()
			fake.Hook = func(op, account, s string) error {
				if op == "set" && strings.HasPrefix(account, "s/") {
					return backendErr(s)
				}
				return nil
			}
			k, err := NewKeychainWithFake(nil, fake)
			if err != nil {
				t.Fatal(err)
			}
			err = k.Set(t.Context(), testKey, NewValue(secret))
			if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), secret) {
				t.Fatalf("error = %v; want an error without the secret", err)
			}
			if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v lost its sentinel", err)
			}
			// The failed Set took back its index entry.
			if names, err := k.List(t.Context(), testKey.Extension, testKey.User); err != nil || len(names) != 0 {
				t.Errorf("List after a failed Set = %q, %v; want nothing", names, err)
			}
		})
	}
}

func TestKeychainNeverAutolaunchesABus(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env, goos string
		wantErr   string
	}{
		"unset":          {"", "linux", "DBUS_SESSION_BUS_ADDRESS is not set"},
		"autolaunch":     {"autolaunch:", "linux", "autolaunched bus"},
		"autolaunch 2nd": {"unix:path=/nonexistent;autolaunch:", "freebsd", "autolaunched bus"},
		"macOS":          {"", "darwin", ""},
		"Windows":        {"", "windows", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			fake := NewFakeKeyring()
			fake.Hook = func(string, string, string) error { calls.Add(1); return nil }
			k, err := newKeychain(nil, fake, func(string) string { return tc.env }, tc.goos)
			if err != nil {
				t.Fatal(err)
			}
			err = k.Probe(t.Context())
			if tc.wantErr == "" {
				if err != nil || calls.Load() == 0 {
					t.Fatalf("Probe on %s = %v after %d calls; want the keychain asked", tc.goos, err, calls.Load())
				}
				return
			}
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.wantErr) ||
				!strings.Contains(err.Error(), "encrypted file store") {
				t.Errorf("Probe = %v; want ErrUnavailable saying %q and pointing to the file store", err, tc.wantErr)
			}
			if err := k.Set(t.Context(), testKey, NewValue("v")); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Set = %v, want ErrUnavailable", err)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the keyring library was called %d times without a bus", n)
			}
		})
	}
}

func TestNewKeychainOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts        *KeychainOptions
		wantErr     error
		wantService string
		wantTimeout time.Duration
	}{
		"nil":              {nil, nil, DefaultKeychainService, DefaultKeychainTimeout},
		"zero":             {&KeychainOptions{}, nil, DefaultKeychainService, DefaultKeychainTimeout},
		"custom":           {&KeychainOptions{Service: "svc", Timeout: time.Second}, nil, "svc", time.Second},
		"NUL in service":   {&KeychainOptions{Service: "a\x00b"}, ErrInvalid, "", 0},
		"long service":     {&KeychainOptions{Service: strings.Repeat("s", MaxPartSize+1)}, ErrInvalid, "", 0},
		"negative timeout": {&KeychainOptions{Timeout: -time.Second}, ErrInvalid, "", 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k, err := NewKeychain(tc.opts)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("NewKeychain error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff([]any{tc.wantService, tc.wantTimeout}, []any{k.Service(), k.timeout}); diff != "" {
				t.Errorf("options mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeychainItemLayout pins what lands in the keychain: the secrets, one
// name index per (extension, user), one user index; and that deleting the
// last secret removes the indexes too.
func TestKeychainItemLayout(t *testing.T) {
	t.Parallel()
	fake := NewFakeKeyring()
	k, err := NewKeychainWithFake(&KeychainOptions{Service: "svc"}, fake)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, key := range []Key{
		{Extension: "mcp", User: "alice", Name: "b"},
		{Extension: "mcp", User: "alice", Name: "a/1"},
		{Extension: "other", User: "alice", Name: "a"},
	} {
		if err := k.Set(ctx, key, NewValue("v")); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"n/mcp/alice", "n/other/alice", "s/mcp/alice/a%2F1", "s/mcp/alice/b", "s/other/alice/a", "u/alice"}
	if diff := cmp.Diff(want, fake.Accounts("svc")); diff != "" {
		t.Errorf("accounts mismatch (-want +got):\n%s", diff)
	}
	index, _ := fake.Item("svc", "n/mcp/alice")
	if diff := cmp.Diff(`["a/1","b"]`, index); diff != "" {
		t.Errorf("name index mismatch (-want +got):\n%s", diff)
	}
	users, _ := fake.Item("svc", "u/alice")
	if diff := cmp.Diff(`["mcp","other"]`, users); diff != "" {
		t.Errorf("user index mismatch (-want +got):\n%s", diff)
	}
	for _, key := range []Key{{Extension: "mcp", User: "alice", Name: "b"}, {Extension: "mcp", User: "alice", Name: "a/1"}} {
		if err := k.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"n/other/alice", "s/other/alice/a", "u/alice"}, fake.Accounts("svc")); diff != "" {
		t.Errorf("accounts after Delete mismatch (-want +got):\n%s", diff)
	}
	if err := k.DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := fake.Accounts("svc"); len(got) != 0 {
		t.Errorf("accounts after DeleteUser: %q, want none", got)
	}
}

// TestKeychainCorruptIndex: a damaged index item is reported, with the
// remedy, and never read as "no secrets".
func TestKeychainCorruptIndex(t *testing.T) {
	t.Parallel()
	fake := NewFakeKeyring()
	k, err := NewKeychainWithFake(&KeychainOptions{Service: "svc"}, fake)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.Set("svc", "n/mcp/alice", "{not json"); err != nil {
		t.Fatal(err)
	}
	_, err = k.List(t.Context(), "mcp", "alice")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), "secret-tool clear") {
		t.Fatalf("List with a corrupt index = %v; want ErrUnavailable naming the item and the remedy", err)
	}
}

// checkIndexInvariant: every secret in the keychain is listed in its name
// index, and its extension in the user index. This is what lets DeleteUser
// find everything, whatever failed before.
func checkIndexInvariant(t interface {
	Helper()
	Fatalf(string, ...any)
}, fake *FakeKeyring, service string) {
	t.Helper()
	lists := map[string]string{}
	for _, a := range fake.Accounts(service) {
		if a[0] != kindSecret {
			s, _ := fake.Item(service, a)
			lists[a] = s
		}
	}
	for _, a := range fake.Accounts(service) {
		kind, parts, err := decodeAccount(a)
		if err != nil {
			t.Fatalf("undecodable account %q", a)
		}
		if kind != kindSecret {
			continue
		}
		ext, user, name := parts[0], parts[1], parts[2]
		if !strings.Contains(lists[nameIndexAccount(ext, user)], fmt.Sprintf("%q", name)) {
			t.Fatalf("secret %q is missing from its name index %q", a, lists[nameIndexAccount(ext, user)])
		}
		if !strings.Contains(lists[userIndexAccount(user)], fmt.Sprintf("%q", ext)) {
			t.Fatalf("secret %q is missing from its user index %q", a, lists[userIndexAccount(user)])
		}
	}
}

// TestKeychainIndexInvariantUnderFailures fails one keychain call of a
// random sequence of mutations, either outright or by answering after the
// timeout (the call lands late), and checks after every step that the
// indexes still cover every secret, and at the end that DeleteUser leaves
// nothing behind.
func TestKeychainIndexInvariantUnderFailures(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		// Each call fails with probability 1/every: outright, or (one
		// failure in four) by answering after the timeout.
		every := rapid.IntRange(3, 8).Draw(rt, "every")
		var mu sync.Mutex
		rnd := mathrand.New(mathrand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 0))
		var off atomic.Bool
		fake := NewFakeKeyring()
		fake.Hook = func(op, account, _ string) error {
			if off.Load() {
				return nil
			}
			mu.Lock()
			fail, slow := rnd.IntN(every) == 0, rnd.IntN(4) == 0
			mu.Unlock()
			switch {
			case !fail:
				return nil
			case slow:
				time.Sleep(12 * time.Millisecond) // past the timeout, then succeed
				return nil
			}
			return errors.New("injected failure")
		}
		k, err := NewKeychainWithFake(&KeychainOptions{Service: "svc", Timeout: 4 * time.Millisecond}, fake)
		if err != nil {
			rt.Fatal(err)
		}
		keys := rapid.SampledFrom([]Key{
			{Extension: "x", User: "a", Name: "1"}, {Extension: "x", User: "a", Name: "2"},
			{Extension: "y", User: "a", Name: "1"}, {Extension: "x", User: "b", Name: "1"},
			{Extension: "x", User: "a", Name: "1"}, {Extension: "x", User: "a", Name: "1"},
		})
		ctx := context.Background()
		for range rapid.IntRange(1, 12).Draw(rt, "steps") {
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				_ = k.Set(ctx, keys.Draw(rt, "key"), NewValue("v"))
			case 1:
				_ = k.Delete(ctx, keys.Draw(rt, "key"))
			case 2:
				_ = k.DeleteUser(ctx, rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "user"))
			}
			// Sometimes let abandoned calls land before the next step, and
			// check; otherwise go on while they are still pending.
			if rapid.Bool().Draw(rt, "settle") {
				waitIdle(t, k)
				checkIndexInvariant(rt, fake, "svc")
			}
		}
		waitIdle(t, k)
		checkIndexInvariant(rt, fake, "svc")
		off.Store(true) // no more failures
		for _, u := range []string{"a", "b"} {
			// The 4 ms timeout can still expire on a loaded machine: what
			// this checks is that DeleteUser leaves nothing behind, so a
			// timed-out attempt is retried once its calls have landed.
			var err error
			for attempt := 0; attempt < 50; attempt++ {
				if err = k.DeleteUser(ctx, u); err == nil || !errors.Is(err, ErrUnavailable) {
					break
				}
				waitIdle(t, k)
			}
			if err != nil {
				rt.Fatalf("DeleteUser(%q): %v", u, err)
			}
		}
		if left := fake.Accounts("svc"); len(left) != 0 {
			rt.Fatalf("DeleteUser left items behind: %q", left)
		}
	})
}
