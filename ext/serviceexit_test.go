package ext_test

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestStderrTail: the tail keeps the last lines within its bounds, cuts a
// long line (marking the cut), joins what Write brings in pieces, and
// escapes control and format characters and invalid UTF-8.
func TestStderrTail(t *testing.T) {
	var tl ext.StderrTail
	_, _ = tl.Write([]byte("first\nsec"))
	_, _ = tl.Write([]byte("ond\r\nred \x1b[31m, rtl \u202e, tab\t, bad \xff\nunfinished"))
	want := []string{"first", "second", `red \u001b[31m, rtl \u202e, tab\u0009, bad \xff`, "unfinished"}
	if got := tl.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines = %q, want %q", got, want)
	}
	tl.Add([]byte(strings.Repeat("x", 3*ext.StderrTailLineMax)))
	got := tl.Lines()
	if last := got[len(got)-1]; last != strings.Repeat("x", ext.StderrTailLineMax)+"…" {
		t.Errorf("a long line kept as %d bytes, want %d and the cut mark", len(last), ext.StderrTailLineMax)
	}
	for range 3 * ext.StderrTailLines {
		tl.Add([]byte(strings.Repeat("y", 500)))
	}
	got, size := tl.Lines(), 0
	for _, l := range got {
		size += len(l)
	}
	if size > ext.StderrTailBytes || len(got) > ext.StderrTailLines || len(got) < ext.StderrTailBytes/500-1 {
		t.Errorf("%d lines, %d bytes kept; want at most %d lines and %d bytes, as many as fit", len(got), size, ext.StderrTailLines, ext.StderrTailBytes)
	}
}
