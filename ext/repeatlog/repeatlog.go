// Package repeatlog collapses a warning that repeats: a server that fails
// for every user at every retry logs its first line at once and then one
// line per window with the count of the repeats and how many users they
// concerned, instead of a line per user per retry. A [Log] is safe for
// concurrent use; it owns its window timers, which [Log.Close] stops
// (logging what is counted) and waits for.
package repeatlog

import (
	"log/slog"
	"sync"
	"time"
)

// maxRepeatUsers bounds the distinct users a window of repeats counts
// (beyond it the count of users is a floor).
const maxRepeatUsers = 10000

// Log collapses repeated warnings: the first line of a kind (message,
// server, reason) is logged at once, naming its user; the same kind
// again within the window, for any user, is only counted, and when the
// window ends one line gives the count and how many users it concerned
// (message + " again (repeats collapsed)", with server, reason, count,
// users and window).
type Log struct {
	log    *slog.Logger
	window time.Duration

	mu     sync.Mutex
	open   map[repeatKey]*repeats
	closed bool
	wg     sync.WaitGroup // the window timers
}

type repeatKey struct{ msg, server, reason string }

type repeats struct {
	count int
	users map[string]struct{}
	timer *time.Timer
}

// DefaultWindow is the window of a [Log] made with none.
const DefaultWindow = time.Minute

// New returns a Log that writes to log and collapses within window
// (DefaultWindow when not positive).
func New(log *slog.Logger, window time.Duration) *Log {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Log{log: log, window: window, open: map[repeatKey]*repeats{}}
}

// Warn logs msg for user's server failing with reason (and attrs), or
// counts it when the same message, server and reason was logged within
// the window.
func (r *Log) Warn(msg, user, server, reason string, attrs ...any) {
	k := repeatKey{msg, server, reason}
	r.mu.Lock()
	if b := r.open[k]; b != nil {
		b.count++
		if len(b.users) < maxRepeatUsers {
			b.users[user] = struct{}{}
		}
		r.mu.Unlock()
		return
	}
	if !r.closed {
		b := &repeats{users: map[string]struct{}{}}
		r.open[k] = b
		r.wg.Add(1)
		b.timer = time.AfterFunc(r.window, func() {
			defer r.wg.Done()
			r.flush(k, b)
		})
	}
	r.mu.Unlock()
	r.log.Warn(msg, append([]any{"user", user, "server", server, "reason", reason}, attrs...)...)
}

// flush ends the window of k (b) and logs its count, if any.
func (r *Log) flush(k repeatKey, b *repeats) {
	r.mu.Lock()
	if r.open[k] == b {
		delete(r.open, k)
	}
	n, users := b.count, len(b.users)
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn(k.msg+" again (repeats collapsed)", "server", k.server, "reason", k.reason,
			"count", n, "users", users, "window", r.window)
	}
}

// Close logs the counts of the open windows and waits for the timers;
// later warnings are logged one by one. It is idempotent.
func (r *Log) Close() {
	r.mu.Lock()
	r.closed = true
	stopped := map[repeatKey]*repeats{}
	for k, b := range r.open {
		if b.timer.Stop() {
			stopped[k] = b
			r.wg.Done()
		}
	}
	r.mu.Unlock()
	for k, b := range stopped {
		r.flush(k, b)
	}
	r.wg.Wait()
}
