package main

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorText checks that an error's words cannot forge a line or send
// an escape sequence, while the CLI's own lines (errors.Join's, a
// linesError's) stay lines.
func TestErrorText(t *testing.T) {
	forged := errors.New("tool failed\x1b]0;x\a\r\nagenthost: all is well")
	for _, c := range []struct {
		err  error
		want string
	}{
		{forged, `tool failed\u001b]0;x\u0007\u000d\u000aagenthost: all is well`},
		{fmt.Errorf("calling: %w", forged), `calling: tool failed\u001b]0;x\u0007\u000d\u000aagenthost: all is well`},
		{errors.Join(errors.New("one"), forged), "one\n" + `tool failed\u001b]0;x\u0007\u000d\u000aagenthost: all is well`},
		{&linesError{"two servers:\n  a\n  b"}, "two servers:\n  a\n  b"},
	} {
		if got := errorText(c.err); got != c.want {
			t.Errorf("errorText(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}
