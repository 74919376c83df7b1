package guard

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RefusalLogOptions configures [NewRefusalLog]. A nil *RefusalLogOptions
// means the defaults; so does every zero field.
type RefusalLogOptions struct {
	// Burst is how many lines of one reason are logged at once before the
	// rate applies (default 5).
	Burst int
	// Every is the steady rate once the burst is spent: one line of a
	// reason per Every (default 1 s).
	Every time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	_   struct{}
}

// maxReasons bounds the reasons a RefusalLog tracks. Reasons are constant
// phrases of the surfaces' code, so this is never reached; if it were, the
// further reasons would share one budget.
const maxReasons = 256

// RefusalLog logs refused requests, rate-limited per reason (a token
// bucket per reason). One RefusalLog is shared by every surface of a
// server, so that the budget of a reason is the server's, not each
// surface's. It is safe for concurrent use; a nil *RefusalLog logs every
// line.
type RefusalLog struct {
	burst int
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	reasons map[string]*reasonState
}

type reasonState struct {
	lim        *rate.Limiter
	suppressed int
	since      time.Time    // first suppressed line since the last one logged
	logger     *slog.Logger // of the last suppressed line, for Flush
}

// NewRefusalLog returns a RefusalLog.
func NewRefusalLog(opts *RefusalLogOptions) *RefusalLog {
	var o RefusalLogOptions
	if opts != nil {
		o = *opts
	}
	l := &RefusalLog{burst: o.Burst, every: o.Every, now: o.Now, reasons: map[string]*reasonState{}}
	if l.burst <= 0 {
		l.burst = 5
	}
	if l.every <= 0 {
		l.every = time.Second
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// Refused logs a refused request at Warn level on logger: reason is the
// message (a constant phrase such as "mcp: refused an invalid token"),
// args its attributes (never a credential: log a fingerprint); string
// arguments longer than 256 bytes (a client's Host or Origin) are cut. When the
// reason's budget is spent the line is only counted; the next line logged
// for that reason is preceded by "similar refusals suppressed" with the
// reason, the count and since when.
func (l *RefusalLog) Refused(logger *slog.Logger, reason string, args ...any) {
	if l == nil {
		logger.Warn(reason, clipped(args)...)
		return
	}
	now := l.now()
	l.mu.Lock()
	st := l.state(reason)
	if !st.lim.AllowN(now, 1) {
		if st.suppressed == 0 {
			st.since = now
		}
		st.suppressed++
		st.logger = logger
		l.mu.Unlock()
		return
	}
	n, since := st.suppressed, st.since
	st.suppressed, st.logger = 0, nil
	l.mu.Unlock()
	if n > 0 {
		logSuppressed(logger, reason, n, since)
	}
	logger.Warn(reason, clipped(args)...)
}

// maxArg bounds a string argument of a refusal line.
const maxArg = 256

// clipped returns args with long strings cut to maxArg bytes (and marked
// with "…"), copying only when one is cut.
func clipped(args []any) []any {
	out, copied := args, false
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxArg {
			if !copied {
				out, copied = slices.Clone(args), true
			}
			out[i] = strings.ToValidUTF8(s[:maxArg], "") + "…"
		}
	}
	return out
}

// Flush logs the pending "suppressed" lines of every reason (on the
// logger of each one's last suppressed line), so that a count is not lost
// when the server stops. It may be called any number of times.
func (l *RefusalLog) Flush() {
	if l == nil {
		return
	}
	type pending struct {
		reason string
		n      int
		since  time.Time
		logger *slog.Logger
	}
	var out []pending
	l.mu.Lock()
	for reason, st := range l.reasons {
		if st.suppressed > 0 {
			out = append(out, pending{reason, st.suppressed, st.since, st.logger})
			st.suppressed, st.logger = 0, nil
		}
	}
	l.mu.Unlock()
	for _, p := range out {
		logSuppressed(p.logger, p.reason, p.n, p.since)
	}
}

func logSuppressed(logger *slog.Logger, reason string, n int, since time.Time) {
	logger.Warn("similar refusals suppressed", "reason", reason, "suppressed", n,
		"since", since.UTC().Format(time.RFC3339))
}

// state returns reason's bucket; l.mu is held.
func (l *RefusalLog) state(reason string) *reasonState {
	st := l.reasons[reason]
	if st == nil {
		if len(l.reasons) >= maxReasons {
			reason = "(other reasons)"
			if st = l.reasons[reason]; st != nil {
				return st
			}
		}
		st = &reasonState{lim: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.reasons[reason] = st
	}
	return st
}
