package secrets

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestEncodeAccount(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		kind  byte
		parts []string
		want  string
	}{
		"plain":              {kindSecret, []string{"mcp", "alice", "token:github"}, "s/mcp/alice/token:github"},
		"slash in extension": {kindSecret, []string{"x/a", "b", "c"}, "s/x%2Fa/b/c"},
		"slash in user":      {kindSecret, []string{"x", "a/b", "c"}, "s/x/a%2Fb/c"},
		"slash in name":      {kindSecret, []string{"x", "a", "b/c"}, "s/x/a/b%2Fc"},
		"percent":            {kindSecret, []string{"%", "%2F", "%%"}, "s/%25/%252F/%25%25"},
		"control and binary": {kindSecret, []string{"\x00", "\x7f\n", "\xff\xc3"}, "s/%00/%7F%0A/%FF%C3"},
		"unicode stays":      {kindSecret, []string{"é", "ünï", "🔑"}, "s/é/ünï/🔑"},
		"operator":           {kindSecret, []string{"mcp", Operator, "token:team"}, "s/mcp/%01operator/token:team"},
		"empty parts":        {kindSecret, []string{"", "", ""}, "s///"},
		"name index":         {kindNameIndex, []string{"mcp", "alice"}, "n/mcp/alice"},
		"user index":         {kindUserIndex, []string{"a/b"}, "u/a%2Fb"},
		"file key":           {kindFileKey, []string{"/var/lib/agenthost/secrets.enc"}, "f/%2Fvar%2Flib%2Fagenthost%2Fsecrets.enc"},
		"probe":              {kindProbe, []string{"probe"}, "p/probe"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := encodeAccount(tc.kind, tc.parts...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("encodeAccount mismatch (-want +got):\n%s", diff)
			}
			kind, parts, err := decodeAccount(got)
			if err != nil {
				t.Fatalf("decodeAccount(%q): %v", got, err)
			}
			if diff := cmp.Diff(tc.parts, parts); kind != tc.kind || diff != "" {
				t.Errorf("decodeAccount(%q) = %c %q, want %c %q", got, kind, parts, tc.kind, tc.parts)
			}
		})
	}
}

func TestDecodeAccountRejectsNonCanonical(t *testing.T) {
	t.Parallel()
	for _, a := range []string{
		"", "s", "s/", "s/a", "s/a/b", "s/a/b/c/d", "x/a/b/c", "n/a", "u/a/b", "sx/a/b",
		"s/%2f/b/c",    // lower-case hex
		"s/%41/b/c",    // 'A' needs no escape
		"s/%C3%A9/b/c", // é is valid UTF-8 and stays raw
		"s/%/b/c", "s/%2/b/c", "s/a/b/c%", "s/a/b/c%G0",
		"s/\x01/b/c",   // a raw control character
		"s/a%/b/c",     // truncated escape before a separator
		"s/\xff/b/c",   // a raw invalid byte
		"s/a\x00/b/c",  // a raw NUL
		"u/%2F%2Fx/y",  // too many parts
		"p/probe/more", // too many parts
	} {
		if kind, parts, err := decodeAccount(a); err == nil {
			t.Errorf("decodeAccount(%q) = %c %q, want an error", a, kind, parts)
		}
	}
}

// fragments are the pieces that break naive encodings: separators, escape
// characters and escapes, control and invalid bytes, multi-byte UTF-8 (and
// its bytes on their own), kind prefixes and the Operator ID.
var fragments = []string{
	"", "a", "b", "/", "//", "%", "%2F", "%25", "2F", ":", "|", "\\", " ", "é", "\xc3", "\xa9",
	"\x00", "\x01", "\x7f", "\xff", "\n", "s/", "n/", "u/", "🔑", "ü", Operator, "alice", "x/alice",
}

type tuple struct {
	kind  byte
	parts [3]string
	n     int
}

func (tp tuple) encode() string { return encodeAccount(tp.kind, tp.parts[:tp.n]...) }

// randomTuple builds a tuple of a random kind whose parts are each 0–4
// random fragments.
func randomTuple(r *rand.Rand) tuple {
	kinds := []byte{kindSecret, kindSecret, kindSecret, kindNameIndex, kindUserIndex, kindFileKey}
	tp := tuple{kind: kinds[r.IntN(len(kinds))]}
	tp.n = partsOf(tp.kind)
	for i := range tp.n {
		var b strings.Builder
		for range r.IntN(5) {
			b.WriteString(fragments[r.IntN(len(fragments))])
		}
		tp.parts[i] = b.String()
	}
	return tp
}

// checkTuple checks that an encoding is a valid D-Bus string and decodes
// back to the tuple.
func checkTuple(t interface {
	Helper()
	Fatalf(format string, args ...any)
}, tp tuple, enc string) {
	t.Helper()
	if !utf8.ValidString(enc) || strings.IndexByte(enc, 0) >= 0 {
		t.Fatalf("encoding %q of %q is not a valid D-Bus string", enc, tp.parts[:tp.n])
	}
	kind, parts, err := decodeAccount(enc)
	if err != nil || kind != tp.kind || !slices.Equal(parts, tp.parts[:tp.n]) {
		t.Fatalf("decodeAccount(%q) = %c %q, %v; want %c %q", enc, kind, parts, err, tp.kind, tp.parts[:tp.n])
	}
}

// TestKeychainKeyInjective is SECURITY.md E3: distinct tuples, of any kind,
// never share an account. It encodes every secret tuple over a small
// alphabet (exhaustively) and then random tuples until 100,000 distinct
// ones were seen, and counts collisions, which must be 0.
func TestKeychainKeyInjective(t *testing.T) {
	t.Parallel()
	seen := make(map[string]tuple, 130_000)
	collisions := 0
	add := func(tp tuple) {
		enc := tp.encode()
		if prev, ok := seen[enc]; ok {
			if prev != tp {
				collisions++
				if collisions < 5 {
					t.Errorf("collision: %c %q and %c %q both encode to %q", prev.kind, prev.parts[:prev.n], tp.kind, tp.parts[:tp.n], enc)
				}
			}
			return
		}
		seen[enc] = tp
		checkTuple(t, tp, enc)
	}
	small := []string{"", "a", "/", "%", "%2F", "a/b", "\x00", "é", "\xc3"}
	for _, e := range small {
		for _, u := range small {
			for _, n := range small {
				add(tuple{kind: kindSecret, parts: [3]string{e, u, n}, n: 3})
			}
			add(tuple{kind: kindNameIndex, parts: [3]string{e, u}, n: 2})
		}
		add(tuple{kind: kindUserIndex, parts: [3]string{e}, n: 1})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for len(seen) < 100_000 {
		add(randomTuple(r))
	}
	if collisions != 0 {
		t.Fatalf("%d collisions among %d distinct tuples", collisions, len(seen))
	}
	t.Logf("%d distinct tuples, 0 collisions", len(seen))
}

// partGen draws a key part: fragments glued together, or arbitrary bytes.
var partGen = rapid.OneOf(
	rapid.Custom(func(t *rapid.T) string {
		return strings.Join(rapid.SliceOfN(rapid.SampledFrom(fragments), 0, 5).Draw(t, "fragments"), "")
	}),
	rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "bytes")) }),
	rapid.String(),
)

var tupleGen = rapid.Custom(func(t *rapid.T) tuple {
	tp := tuple{kind: rapid.SampledFrom([]byte{kindSecret, kindNameIndex, kindUserIndex, kindFileKey}).Draw(t, "kind")}
	tp.n = partsOf(tp.kind)
	for i := range tp.n {
		tp.parts[i] = partGen.Draw(t, "part")
	}
	return tp
})

// keychainKeyProperty: every encoding round-trips, and two different
// tuples never encode alike.
func keychainKeyProperty(t *rapid.T) {
	a, b := tupleGen.Draw(t, "a"), tupleGen.Draw(t, "b")
	ea, eb := a.encode(), b.encode()
	checkTuple(t, a, ea)
	checkTuple(t, b, eb)
	if a != b && ea == eb {
		t.Fatalf("collision: %c %q and %c %q both encode to %q", a.kind, a.parts[:a.n], b.kind, b.parts[:b.n], ea)
	}
	// Also a near miss: move a separator across a part boundary.
	if a.kind == kindSecret && a.parts[0] != "" {
		c := a
		c.parts[0], c.parts[1] = a.parts[0][:len(a.parts[0])-1], a.parts[0][len(a.parts[0])-1:]+"/"+a.parts[1]
		if c != a && c.encode() == ea {
			t.Fatalf("collision after moving a boundary: %q", ea)
		}
	}
}

func TestKeychainKeyProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, keychainKeyProperty)
}

// FuzzKeychainKey is SECURITY.md G9. The seed corpus runs in every go test;
// go test -fuzz=FuzzKeychainKey explores further.
func FuzzKeychainKey(f *testing.F) {
	// rapid reads its choices from the input 8 bytes at a time; a seed
	// that runs out of bytes is skipped, so the seeds are long.
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		seed := make([]byte, 1024)
		for i := range seed {
			seed[i] = byte(r.Uint32())
		}
		f.Add(seed)
	}
	f.Add([]byte(strings.Repeat("alice/bob%2F\xff\x00", 100)))
	f.Fuzz(rapid.MakeFuzz(keychainKeyProperty))
}

func FuzzDecodeAccount(f *testing.F) {
	for _, seed := range []string{"s/a/b/c", "s/%2F/%25/x", "n/a/b", "u/%01operator", "s/%C3%A9/b/c", "s/é/b/c"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, a string) {
		kind, parts, err := decodeAccount(a)
		if err != nil {
			return
		}
		// Whatever decodes is canonical: it re-encodes to the same account.
		if got := encodeAccount(kind, parts...); got != a {
			t.Fatalf("decodeAccount(%q) re-encodes to %q", a, got)
		}
	})
}
