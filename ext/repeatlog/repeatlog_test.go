package repeatlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedWriter is a bytes.Buffer safe for the timers' writes.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestRepeatLogCollapses: a server that fails with the same reason for
// three users, five times in a window, logs its first line and then one
// line with the count and the users, not five; another reason is a line
// of its own; the window's end (here close) writes the count.
func TestRepeatLogCollapses(t *testing.T) {
	var w lockedWriter
	r := New(slog.New(slog.NewTextHandler(&w, nil)), time.Hour)
	for _, u := range []string{"alice", "bob", "carol", "alice", "bob"} {
		r.Warn("catalog: server quarantined", u, "db", "it exited with status 3")
	}
	r.Warn("catalog: server quarantined", "alice", "db", "another reason")
	r.Close()
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines; want 3 (first, other reason, count):\n%s", len(lines), w.String())
	}
	if !strings.Contains(lines[0], "user=alice") || !strings.Contains(lines[1], `reason="another reason"`) {
		t.Errorf("first lines:\n%s", w.String())
	}
	if !strings.Contains(lines[2], "repeats collapsed") || !strings.Contains(lines[2], "count=4") || !strings.Contains(lines[2], "users=3") {
		t.Errorf("the collapsed line: %s; want count=4 users=3", lines[2])
	}
}

// TestRepeatLogWindowEnds: the count is logged when the window ends, and
// a repeat after it is logged at once again.
func TestRepeatLogWindowEnds(t *testing.T) {
	var w lockedWriter
	r := New(slog.New(slog.NewTextHandler(&w, nil)), 20*time.Millisecond)
	defer r.Close()
	r.Warn("m", "alice", "db", "x")
	r.Warn("m", "bob", "db", "x")
	for !strings.Contains(w.String(), "count=1") {
		time.Sleep(5 * time.Millisecond) // the window's timer writes it
	}
	r.Warn("m", "carol", "db", "x")
	if !strings.Contains(w.String(), "user=carol") {
		t.Errorf("a repeat after the window was not logged at once:\n%s", w.String())
	}
}
