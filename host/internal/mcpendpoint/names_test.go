package mcpendpoint

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func TestMapNames(t *testing.T) {
	t.Parallel()
	long := "s/" + strings.Repeat("x", 100)
	for name, tc := range map[string]struct {
		in   []string
		sep  string
		want map[string]string // "" means: hashed, check shape only
	}{
		"plain": {
			in:   []string{"github/create_issue", "notes/add-note", "fs/read.v2"},
			sep:  "__",
			want: map[string]string{"github/create_issue": "github__create_issue", "notes/add-note": "notes__add-note", "fs/read.v2": "fs__read.v2"},
		},
		"custom separator": {
			in:   []string{"github/create_issue"},
			sep:  ".",
			want: map[string]string{"github/create_issue": "github.create_issue"},
		},
		"disallowed characters": {
			in:   []string{"x/héllo wörld!"},
			sep:  "__",
			want: map[string]string{"x/héllo wörld!": "x__h_llo_w_rld_"},
		},
		"separator collision": {
			in:   []string{"a__b/c", "a/b__c", "a/other"},
			sep:  "__",
			want: map[string]string{"a__b/c": "", "a/b__c": "", "a/other": "a__other"},
		},
		"character collision": {
			in:   []string{"x/hello world", "x/hello_world"},
			sep:  "__",
			want: map[string]string{"x/hello world": "", "x/hello_world": ""},
		},
		"too long": {
			in:   []string{long},
			sep:  "__",
			want: map[string]string{long: ""},
		},
		"search_tools is reserved": {
			in:   []string{"search_tools"},
			sep:  "__",
			want: map[string]string{"search_tools": ""},
		},
		"empty": {
			in:   []string{""},
			sep:  "__",
			want: map[string]string{"": "tool"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := mapNames(tc.in, tc.sep)
			seen := map[string]string{}
			for _, o := range tc.in {
				n := got[o]
				if !validName.MatchString(n) {
					t.Errorf("%q maps to %q: not a valid MCP tool name of at most 64 characters", o, n)
				}
				if prev, dup := seen[n]; dup {
					t.Errorf("%q and %q both map to %q", prev, o, n)
				}
				seen[n] = o
				if n == searchToolName {
					t.Errorf("%q takes the reserved name %q", o, n)
				}
				switch want := tc.want[o]; want {
				case "":
					if !regexp.MustCompile(`_[0-9a-f]{8}$`).MatchString(n) {
						t.Errorf("%q maps to %q: want a hash suffix", o, n)
					}
					if !strings.HasPrefix(sanitize(o, tc.sep), n[:len(n)-9]) {
						t.Errorf("%q maps to %q: want the sanitized name as its prefix", o, n)
					}
				default:
					if n != want {
						t.Errorf("%q maps to %q, want %q", o, n, want)
					}
				}
			}
			// The mapping depends on the set, not on the order.
			rev := make([]string, len(tc.in))
			for i, o := range tc.in {
				rev[len(tc.in)-1-i] = o
			}
			if again := mapNames(rev, tc.sep); !maps.Equal(got, again) {
				t.Errorf("order changed the mapping: %v, reversed %v", got, again)
			}
		})
	}
}

func TestMapNamesHashClash(t *testing.T) {
	t.Parallel()
	// A plain name that happens to equal another tool's hashed name pushes
	// the hashed one to a longer hash.
	clash := hashed("a__b", "a/b", hashLen)
	in := []string{"a/b", "a__b", clash}
	got := mapNames(in, "__")
	seen := map[string]bool{}
	for _, o := range in {
		if seen[got[o]] {
			t.Fatalf("duplicate name %q in %v", got[o], got)
		}
		seen[got[o]] = true
		if !validName.MatchString(got[o]) {
			t.Errorf("invalid name %q", got[o])
		}
	}
	if got[clash] != clash {
		t.Errorf("the plain name %q was renamed to %q", clash, got[clash])
	}
}

func FuzzMapNames(f *testing.F) {
	f.Add("a/b", "a__b", "a/b c")
	f.Add("search_tools", "x/"+strings.Repeat("y", 70), "x/"+strings.Repeat("y", 71))
	f.Fuzz(func(t *testing.T, a, b, c string) {
		in := []string{a}
		for _, s := range []string{b, c} {
			if s != a && (len(in) < 2 || s != in[1]) {
				in = append(in, s)
			}
		}
		got := mapNames(in, "__")
		seen := map[string]bool{}
		for _, o := range in {
			n := got[o]
			if !validName.MatchString(n) || n == searchToolName || seen[n] {
				t.Fatalf("%q maps to %q (all: %v)", o, n, got)
			}
			seen[n] = true
		}
	})
}

func TestCheckSeparator(t *testing.T) {
	t.Parallel()
	for sep, ok := range map[string]bool{"__": true, ".": true, "-": true, "": false, "/": false, "::": false, "a b": false, "123456789": false} {
		if err := checkSeparator(sep); (err == nil) != ok {
			t.Errorf("checkSeparator(%q) = %v, want ok=%v", sep, err, ok)
		}
	}
}

func TestSplitArray(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		`[]`:                           {},
		` [ ] `:                        {},
		`[{"type":"text","text":"a"}]`: {`{"type":"text","text":"a"}`},
		`[{"a":"]},{["}, {"b":[1,{"c":"\"}"}]} ]`: {`{"a":"]},{["}`, `{"b":[1,{"c":"\"}"}]}`},
	} {
		got, ok := splitArray([]byte(in))
		if !ok {
			t.Errorf("splitArray(%s) failed", in)
			continue
		}
		gs := make([]string, len(got))
		for i, g := range got {
			gs[i] = string(g)
		}
		if !slices.Equal(want, gs) {
			t.Errorf("splitArray(%s) = %q, want %q", in, gs, want)
		}
	}
	for _, bad := range []string{``, `{}`, `"x"`, `[`, `[{}`, `[{},]`, `[,{}]`, `[{}{}]`, `[1]`, `["a"]`, `[[]]`, `[{}] x`, `[{]`, `[null]`} {
		if got, ok := splitArray([]byte(bad)); ok {
			t.Errorf("splitArray(%s) = %q, want failure", bad, got)
		}
	}
}

func FuzzSplitArray(f *testing.F) {
	f.Add([]byte(`[{"type":"text","text":"a"},{"type":"image","data":"AA==","mimeType":"image/png"}]`))
	f.Add([]byte(`[{"a":"]\\"}"}]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		blocks, ok := splitArray(in)
		if !ok || !json.Valid(in) {
			return
		}
		// For valid JSON, the blocks are exactly the array's objects.
		var want []json.RawMessage
		if err := json.Unmarshal(in, &want); err != nil {
			t.Fatalf("splitArray accepted %q, which is not an array: %v", in, err)
		}
		if len(want) != len(blocks) {
			t.Fatalf("splitArray(%q) gave %d blocks, want %d", in, len(blocks), len(want))
		}
		for i := range want {
			if string(want[i]) != string(blocks[i]) {
				t.Fatalf("block %d: %q, want %q", i, blocks[i], want[i])
			}
		}
	})
}

func TestToMCPKeepsBytes(t *testing.T) {
	t.Parallel()
	content := `[{"text":"hi","type":"text","x-extra":{"k":[1,2]}},{"type":"image","data":"AAAA","mimeType":"image/png"}]`
	res := &ext.CallToolResult{Content: json.RawMessage(content), StructuredContent: json.RawMessage(`{"z":1,"a":[true]}`), IsError: true}
	f, ok := statelessFields(res)
	if !ok {
		t.Fatal("statelessFields refused the result")
	}
	b, err := json.Marshal(toMCP(f))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Content) != content || string(got.StructuredContent) != `{"z":1,"a":[true]}` || !got.IsError {
		t.Errorf("toMCP changed the result: %s", b)
	}
	for _, bad := range []*ext.CallToolResult{
		{Content: json.RawMessage(`{"type":"text"}`)},
		{Content: json.RawMessage(`[{"type":"text","text":}]`)},
		{Content: json.RawMessage(`[]`), StructuredContent: json.RawMessage(`{"a":}`)},
		{Raw: json.RawMessage(`{"isError":"yes"}`)},
	} {
		if _, ok := statelessFields(bad); ok {
			t.Errorf("statelessFields accepted %+v", bad)
		}
	}
	empty, _ := statelessFields(&ext.CallToolResult{})
	if b, _ := json.Marshal(toMCP(empty)); !strings.Contains(string(b), `"content":[]`) {
		t.Errorf("empty result = %s, want an empty content array", b)
	}
}

func TestVerifyCacheRace(t *testing.T) {
	t.Parallel()
	c := newVerifyCache(time.Minute)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	key := [32]byte{1}
	p := Principal{User: "alice", TokenID: "a1"}
	_, ok, gen := c.get(key)
	if ok {
		t.Fatal("hit in an empty cache")
	}
	c.revoke("a1") // a revocation while the verifier was running
	c.put(key, p, gen)
	if _, ok, _ := c.get(key); ok {
		t.Error("a verification older than a revocation was cached")
	}
	_, _, gen = c.get(key)
	c.put(key, p, gen)
	if got, ok, _ := c.get(key); !ok || got != p {
		t.Errorf("get = %v %v, want %v", got, ok, p)
	}
	now = now.Add(time.Minute)
	if _, ok, _ := c.get(key); ok {
		t.Error("an expired entry was returned")
	}
}
