package termsafe_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext/termsafe"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain tool":                   "plain tool",
		"héllo ✓ \ufffd":               "héllo ✓ \ufffd",
		"t\x1b[2J\x1b]0;pwned\a":       `t\u001b[2J\u001b]0;pwned\u0007`,
		"a\r\nforged line\tx":          `a\u000d\u000aforged line\u0009x`,
		"osc52 \x1b]52;c;ZXZpbA==\x07": `osc52 \u001b]52;c;ZXZpbA==\u0007`,
		"del\x7f c1\u009b31m":          `del\u007f c1\u009b31m`,
		"bidi \u202egnp.exe\u2066":     `bidi \u202egnp.exe\u2066`,
		"bad \xff\xc3 utf8":            `bad \xff\xc3 utf8`,
	} {
		if got := termsafe.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriterKeepsLinesAndJSON(t *testing.T) {
	var b bytes.Buffer
	w := termsafe.NewWriter(&b)
	in := "NAME\tDESC\nt\x1b]0;x\a\tdesc\r\n"
	if _, err := w.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if want := "NAME\tDESC\nt\\u001b]0;x\\u0007\tdesc\\u000d\n"; b.String() != want {
		t.Errorf("writer wrote %q, want %q", b.String(), want)
	}
	// encoding/json leaves DEL, C1 and bidi controls raw; escaped by the
	// writer, the JSON still decodes to the same value.
	val := "x\x7f\u009b\u202e"
	js, _ := json.Marshal(map[string]string{"d": val})
	b.Reset()
	if _, err := w.Write(js); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsFunc(b.String(), termsafe.Unsafe) {
		t.Errorf("writer left an unsafe character: %q", b.String())
	}
	var got map[string]string
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || got["d"] != val {
		t.Errorf("escaped JSON %s decodes to %q, %v; want %q", b.String(), got["d"], err, val)
	}
}
