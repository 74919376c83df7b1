// Package secretstest is the conformance suite for [secrets.Store]
// implementations. Every backend in package secrets passes it, and so must
// any other Store the host is given.
//
//	func TestConformance(t *testing.T) {
//		secretstest.Run(t, func(t *testing.T) secrets.Store { return secrets.NewMemory() })
//	}
package secretstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/secrets"
)

// Run runs the conformance suite. open is called once per subtest and must
// return an empty Store that no other subtest uses; Run closes it when the
// subtest ends (Close is idempotent, so open may also register its own
// cleanup). The subtests run one after another.
//
// What is checked: set, get, overwrite, delete and list; ErrNotFound as
// distinct from ErrUnavailable; isolation of users and extensions (a
// canary per key, read back through every combination, delimiter tricks
// included); DeleteUser removes one user in every extension and nothing
// else; 50 concurrent Sets lose no name; a 1 MiB and a binary value
// round-trip; key validation; canceled contexts; Close; and that no canary
// appears in an error, in fmt output of a Value or in slog output.
func Run(t *testing.T, open func(t *testing.T) secrets.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s secrets.Store)
	}{
		{"SetGetOverwriteDelete", testSetGetOverwriteDelete},
		{"NotFound", testNotFound},
		{"ListSorted", testListSorted},
		{"Isolation", testIsolation},
		{"DeleteUser", testDeleteUser},
		{"ConcurrentSets", testConcurrentSets},
		{"LargeValue", testLargeValue},
		{"BinaryAndEmptyValues", testBinaryAndEmptyValues},
		{"KeyValidation", testKeyValidation},
		{"LongestKey", testLongestKey},
		{"Redaction", testRedaction},
		{"CanceledContext", testCanceledContext},
		{"Close", testClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// Canary returns a unique secret for principal, of the form
// CANARY-<principal>-<16 random hex digits> (SECURITY.md §7).
func Canary(principal string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "CANARY-" + principal + "-" + hex.EncodeToString(b[:])
}

// mustSet sets k to v or fails the test.
func mustSet(t *testing.T, s secrets.Store, k secrets.Key, v string) {
	t.Helper()
	if err := s.Set(t.Context(), k, secrets.NewValue(v)); err != nil {
		t.Fatalf("Set(%v): %v", k, err)
	}
}

// wantValue checks that k holds want.
func wantValue(t *testing.T, s secrets.Store, k secrets.Key, want string) {
	t.Helper()
	got, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get(%v): %v", k, err)
	}
	if got.Reveal() != want {
		t.Fatalf("Get(%v) returned a different value (%d bytes, want %d)", k, got.Len(), len(want))
	}
}

// wantNotFound checks that k holds nothing.
func wantNotFound(t *testing.T, s secrets.Store, k secrets.Key) {
	t.Helper()
	_, err := s.Get(t.Context(), k)
	if !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("Get(%v) error = %v, want ErrNotFound", k, err)
	}
	if errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("Get(%v) error = %v wraps ErrUnavailable too; not found and unavailable must be distinct", k, err)
	}
}

// wantList checks the names of (extension, user).
func wantList(t *testing.T, s secrets.Store, extension, user string, want []string) {
	t.Helper()
	got, err := s.List(t.Context(), extension, user)
	if err != nil {
		t.Fatalf("List(%q, %q): %v", extension, user, err)
	}
	if !slices.Equal(want, got) {
		t.Fatalf("List(%q, %q) = %q, want %q", extension, user, got, want)
	}
}

// noCanary fails if any canary appears in text.
func noCanary(t *testing.T, what, text string, canaries ...string) {
	t.Helper()
	for _, c := range canaries {
		if c != "" && strings.Contains(text, c) {
			t.Errorf("%s contains a secret value: %q", what, text)
		}
	}
}

func testSetGetOverwriteDelete(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "token:github"}
	first, second := Canary("alice"), Canary("alice")
	mustSet(t, s, k, first)
	wantValue(t, s, k, first)
	mustSet(t, s, k, second)
	wantValue(t, s, k, second)
	wantList(t, s, "mcp", "alice", []string{"token:github"})
	if err := s.Delete(ctx, k); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantNotFound(t, s, k)
	wantList(t, s, "mcp", "alice", nil)
	// Set after Delete works again.
	mustSet(t, s, k, first)
	wantValue(t, s, k, first)
}

func testNotFound(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "missing"}
	wantNotFound(t, s, k)
	if err := s.Delete(ctx, k); err != nil {
		t.Errorf("Delete of a missing secret: %v, want nil", err)
	}
	wantList(t, s, "mcp", "nobody", nil)
	if err := s.DeleteUser(ctx, "nobody"); err != nil {
		t.Errorf("DeleteUser of a user without secrets: %v, want nil", err)
	}
	// A secret with the same name elsewhere does not make it found.
	mustSet(t, s, secrets.Key{Extension: "mcp", User: "bob", Name: "missing"}, Canary("bob"))
	wantNotFound(t, s, k)
}

func testListSorted(t *testing.T, s secrets.Store) {
	names := []string{"token:z", "b", "é", "a", "token:a", "A", "with space", "slash/name", "pct%2F"}
	for _, n := range names {
		mustSet(t, s, secrets.Key{Extension: "mcp", User: "alice", Name: n}, Canary("alice"))
	}
	// Overwriting does not duplicate a name.
	mustSet(t, s, secrets.Key{Extension: "mcp", User: "alice", Name: "b"}, Canary("alice"))
	want := slices.Clone(names)
	slices.Sort(want)
	wantList(t, s, "mcp", "alice", want)
	wantList(t, s, "mcp", "bob", nil)
	wantList(t, s, "other", "alice", nil)
}

// principals mixes ordinary IDs with ones built to collide under a naive
// "ext/user/name" or "ext:user:name" encoding.
var (
	isolationUsers = []string{"alice", "bob", "alice/bob", "alice:bob", "al", "ice", "alice%2Fbob", "Alice", "ünï©ødé", secrets.Operator}
	isolationExts  = []string{"x", "y", "x/alice", "x:alice"}
)

func testIsolation(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	type slot struct{ ext, user string }
	canaries := map[slot]string{}
	for _, ext := range isolationExts {
		for _, user := range isolationUsers {
			c := Canary(user + "@" + ext)
			canaries[slot{ext, user}] = c
			mustSet(t, s, secrets.Key{Extension: ext, User: user, Name: "token"}, c)
		}
	}
	// Names that would collide with user or extension boundaries.
	tricky := []secrets.Key{
		{Extension: "x", User: "alice", Name: "bob/token"},
		{Extension: "x", User: "alice/bob", Name: "token2"},
		{Extension: "x/alice", User: "bob", Name: "token2"},
	}
	trickyCanaries := map[secrets.Key]string{}
	for _, k := range tricky {
		c := Canary("tricky")
		trickyCanaries[k] = c
		mustSet(t, s, k, c)
	}
	all := slices.Collect(func(yield func(string) bool) {
		for _, c := range canaries {
			if !yield(c) {
				return
			}
		}
	})
	// Every (extension, user) reads back exactly its own canary, and never
	// another one.
	for sl, want := range canaries {
		got, err := s.Get(ctx, secrets.Key{Extension: sl.ext, User: sl.user, Name: "token"})
		if err != nil {
			t.Fatalf("Get(%q, %q): %v", sl.ext, sl.user, err)
		}
		if got.Reveal() != want {
			owner := "no one"
			for other, c := range canaries {
				if c == got.Reveal() {
					owner = fmt.Sprintf("%q in extension %q", other.user, other.ext)
				}
			}
			t.Errorf("user %q in extension %q read the secret of %s", sl.user, sl.ext, owner)
		}
	}
	for k, want := range trickyCanaries {
		wantValue(t, s, k, want)
	}
	// Lists show each pair only its own names.
	wantList(t, s, "x", "alice", []string{"bob/token", "token"})
	wantList(t, s, "x", "alice/bob", []string{"token", "token2"})
	wantList(t, s, "x/alice", "bob", []string{"token", "token2"})
	wantList(t, s, "y", secrets.Operator, []string{"token"})
	// A user that exists only as a prefix or a join of others has nothing.
	for _, ghost := range []string{"alicebob", "alice/", "/bob", "x/alice/bob", "operator", "\x01operato"} {
		_, err := s.Get(ctx, secrets.Key{Extension: "x", User: ghost, Name: "token"})
		if err == nil {
			t.Errorf("Get as user %q found a secret; it must not exist", ghost)
		}
		if err != nil {
			noCanary(t, "Get error", err.Error(), all...)
		}
	}
}

func testDeleteUser(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	keys := map[secrets.Key]string{}
	for _, k := range []secrets.Key{
		{Extension: "x", User: "alice", Name: "a"},
		{Extension: "x", User: "alice", Name: "b"},
		{Extension: "y", User: "alice", Name: "a"},
		{Extension: "x", User: "bob", Name: "a"},
		{Extension: "y", User: "alice/bob", Name: "a"},
		{Extension: "x", User: "alic", Name: "a"},
		{Extension: "x", User: secrets.Operator, Name: "a"},
	} {
		keys[k] = Canary(k.User)
		mustSet(t, s, k, keys[k])
	}
	if err := s.DeleteUser(ctx, "alice"); err != nil {
		t.Fatalf("DeleteUser: %v", err)
	}
	for k, v := range keys {
		if k.User == "alice" {
			wantNotFound(t, s, k)
		} else {
			wantValue(t, s, k, v)
		}
	}
	wantList(t, s, "x", "alice", nil)
	wantList(t, s, "y", "alice", nil)
	wantList(t, s, "x", "bob", []string{"a"})
	// The user can store secrets again afterwards.
	k := secrets.Key{Extension: "x", User: "alice", Name: "again"}
	mustSet(t, s, k, "v")
	wantList(t, s, "x", "alice", []string{"again"})
	if err := s.DeleteUser(ctx, "alice"); err != nil {
		t.Fatalf("DeleteUser: %v", err)
	}
	wantNotFound(t, s, k)
}

func testConcurrentSets(t *testing.T, s secrets.Store) {
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	want := make([]string, n)
	values := map[secrets.Key]string{}
	for i := range n {
		name := fmt.Sprintf("name%02d", i)
		want[i] = name
		for _, user := range []string{"alice", "bob"} {
			k := secrets.Key{Extension: "mcp", User: user, Name: name}
			values[k] = Canary(user)
		}
	}
	for k, v := range values {
		wg.Go(func() {
			if err := s.Set(t.Context(), k, secrets.NewValue(v)); err != nil {
				errs <- fmt.Errorf("Set(%v): %w", k, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	wantList(t, s, "mcp", "alice", want)
	wantList(t, s, "mcp", "bob", want)
	for k, v := range values {
		wantValue(t, s, k, v)
	}
}

func testLargeValue(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	big := make([]byte, secrets.MaxValueSize)
	_, _ = rand.Read(big)
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "big"}
	mustSet(t, s, k, string(big))
	wantValue(t, s, k, string(big))

	canary := Canary("alice")
	tooBig := strings.Repeat(canary, secrets.MaxValueSize/len(canary)+1)
	k2 := secrets.Key{Extension: "mcp", User: "alice", Name: "too-big"}
	err := s.Set(ctx, k2, secrets.NewValue(tooBig))
	if !errors.Is(err, secrets.ErrInvalid) {
		t.Fatalf("Set of %d bytes: error = %v, want ErrInvalid", len(tooBig), err)
	}
	noCanary(t, "Set error", err.Error(), canary)
	wantNotFound(t, s, k2)
	wantList(t, s, "mcp", "alice", []string{"big"})
}

func testBinaryAndEmptyValues(t *testing.T, s secrets.Store) {
	for name, v := range map[string]string{
		"binary":  "\x00\xff\xfe not UTF-8 \xc3\x28 \n\r\t\x7f" + string(rune(0x10FFFF)),
		"empty":   "",
		"unicode": "päss wörd ✓ 🔑",
		"json":    `{"a":"\u0000","b":[1,2]}`,
	} {
		k := secrets.Key{Extension: "mcp", User: "alice", Name: name}
		mustSet(t, s, k, v)
		wantValue(t, s, k, v)
	}
}

func testKeyValidation(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	canary := Canary("validation")
	long := strings.Repeat("a", secrets.MaxPartSize+1)
	for name, tc := range map[string]struct {
		key  secrets.Key
		part string // named in the error
	}{
		"empty extension":         {secrets.Key{User: "alice", Name: "token"}, "extension"},
		"empty user":              {secrets.Key{Extension: "mcp", Name: "token"}, "user"},
		"empty name":              {secrets.Key{Extension: "mcp", User: "alice"}, "name"},
		"NUL in extension":        {secrets.Key{Extension: "m\x00cp", User: "alice", Name: "token"}, "extension"},
		"NUL in user":             {secrets.Key{Extension: "mcp", User: "al\x00ice", Name: "token"}, "user"},
		"NUL in name":             {secrets.Key{Extension: "mcp", User: "alice", Name: "tok\x00en"}, "name"},
		"long extension":          {secrets.Key{Extension: long, User: "alice", Name: "token"}, "extension"},
		"long user":               {secrets.Key{Extension: "mcp", User: long, Name: "token"}, "user"},
		"long name":               {secrets.Key{Extension: "mcp", User: "alice", Name: long}, "name"},
		"invalid UTF-8 user":      {secrets.Key{Extension: "mcp", User: "al\xffice", Name: "token"}, "user"},
		"newline in name":         {secrets.Key{Extension: "mcp", User: "alice", Name: "to\nken"}, "name"},
		"operator look-alike":     {secrets.Key{Extension: "mcp", User: secrets.Operator + "x", Name: "token"}, "user"},
		"operator as extension":   {secrets.Key{Extension: secrets.Operator, User: "alice", Name: "token"}, "extension"},
		"DEL in extension":        {secrets.Key{Extension: "mc\x7fp", User: "alice", Name: "token"}, "extension"},
		"escape char in user":     {secrets.Key{Extension: "mcp", User: "\x1b[31malice", Name: "token"}, "user"},
		"operator prefix in name": {secrets.Key{Extension: "mcp", User: "alice", Name: secrets.Operator}, "name"},
	} {
		t.Run(name, func(t *testing.T) {
			check := func(method string, err error) {
				t.Helper()
				if !errors.Is(err, secrets.ErrInvalid) {
					t.Errorf("%s: error = %v, want ErrInvalid", method, err)
					return
				}
				if !strings.Contains(err.Error(), tc.part) {
					t.Errorf("%s: error %q does not name the part %q", method, err, tc.part)
				}
				noCanary(t, method+" error", err.Error(), canary)
			}
			_, err := s.Get(ctx, tc.key)
			check("Get", err)
			check("Set", s.Set(ctx, tc.key, secrets.NewValue(canary)))
			check("Delete", s.Delete(ctx, tc.key))
			if tc.part != "name" {
				_, err = s.List(ctx, tc.key.Extension, tc.key.User)
				check("List", err)
			}
			if tc.part == "user" {
				check("DeleteUser", s.DeleteUser(ctx, tc.key.User))
			}
		})
	}
	// Nothing was stored under any of them.
	wantList(t, s, "mcp", "alice", nil)
}

func testLongestKey(t *testing.T, s secrets.Store) {
	// Parts of exactly MaxPartSize bytes, multi-byte characters and
	// delimiters included, are valid.
	part := func(fill string) string {
		p := strings.Repeat(fill, secrets.MaxPartSize/len(fill))
		return p + strings.Repeat("a", secrets.MaxPartSize-len(p))
	}
	k := secrets.Key{Extension: part("é/"), User: part("%ü"), Name: part("✓:")}
	for _, p := range []string{k.Extension, k.User, k.Name} {
		if len(p) != secrets.MaxPartSize {
			t.Fatalf("test bug: part is %d bytes", len(p))
		}
	}
	v := Canary("long")
	mustSet(t, s, k, v)
	wantValue(t, s, k, v)
	wantList(t, s, k.Extension, k.User, []string{k.Name})
	if err := s.DeleteUser(t.Context(), k.User); err != nil {
		t.Fatalf("DeleteUser: %v", err)
	}
	wantNotFound(t, s, k)
}

func testRedaction(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	canary := Canary("redaction")
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "token"}
	mustSet(t, s, k, canary)
	v, err := s.Get(ctx, k)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if v.Reveal() != canary {
		t.Fatalf("Reveal did not return the stored value")
	}
	type holder struct {
		Token secrets.Value
		Ptr   *secrets.Value
	}
	h := holder{Token: v, Ptr: &v}
	texts := map[string]string{
		"fmt":        fmt.Sprintf("%v %+v %#v %s %q %x %X %d %10.3s %T", v, v, v, v, v, v, v, v, v, v),
		"fmt struct": fmt.Sprintf("%v %+v %#v", h, h, &h),
		"fmt slice":  fmt.Sprint([]secrets.Value{v}, map[string]secrets.Value{"k": v}),
		"String":     v.String() + v.GoString(),
	}
	if b, err := json.Marshal(h); err != nil {
		t.Errorf("json.Marshal: %v", err)
	} else {
		texts["json"] = string(b)
	}
	if b, err := json.Marshal(map[secrets.Value]int{v: 1}); err == nil {
		texts["json map key"] = string(b)
	}
	var logs bytes.Buffer
	jl := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	jl.Info("secret", "value", v, "holder", h, slog.Any("any", v), slog.Group("g", "v", v))
	tl := slog.New(slog.NewTextHandler(&logs, nil))
	tl.Info("secret", "value", v, "ptr", &v, "holder", h)
	texts["slog"] = logs.String()
	for what, text := range texts {
		noCanary(t, what, text, canary)
		if what != "json map key" && !strings.Contains(text, "[redacted]") {
			t.Errorf("%s output %q does not say [redacted]", what, text)
		}
	}

	// Errors of failing calls that carry the canary never repeat it.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	errs := map[string]error{
		"Set invalid key": s.Set(ctx, secrets.Key{Extension: "mcp", User: "", Name: "x"}, v),
		"Set canceled":    s.Set(canceled, k, v),
	}
	_, errs["Get missing"] = s.Get(ctx, secrets.Key{Extension: "mcp", User: "alice", Name: "other"})
	for what, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", what)
			continue
		}
		noCanary(t, what+" error", err.Error(), canary)
		noCanary(t, what+" error (%+v)", fmt.Sprintf("%+v", err), canary)
	}
}

func testCanceledContext(t *testing.T, s secrets.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "token"}
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context: error = %v, want context.Canceled", method, err)
		}
	}
	check("Set", s.Set(ctx, k, secrets.NewValue("v")))
	_, err := s.Get(ctx, k)
	check("Get", err)
	check("Delete", s.Delete(ctx, k))
	_, err = s.List(ctx, "mcp", "alice")
	check("List", err)
	check("DeleteUser", s.DeleteUser(ctx, "alice"))
	wantNotFound(t, s, k)
}

func testClose(t *testing.T, s secrets.Store) {
	ctx := t.Context()
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "token"}
	mustSet(t, s, k, "v")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	_, err := s.Get(ctx, k)
	if !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Get after Close: error = %v, want ErrUnavailable", err)
	}
	if err := s.Set(ctx, k, secrets.NewValue("w")); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Set after Close: error = %v, want ErrUnavailable", err)
	}
	if _, err := s.List(ctx, "mcp", "alice"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("List after Close: error = %v, want ErrUnavailable", err)
	}
}
