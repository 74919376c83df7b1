package host

import (
	"time"

	"github.com/agenthost/agenthost/host/internal/limits"
)

// LimitsConfig is the operator's rate limits (README "Rate limits"): per
// user, per server and per tool (globs), calls per minute and concurrent
// calls, with overrides per user and group ("group:NAME").
type LimitsConfig = limits.Config

// Limit bounds calls: per minute (a token bucket), at once.
type Limit = limits.Limit

// LimitSet is a set of limits: on a user's calls, to each server, of each
// tool.
type LimitSet = limits.Set

// RateLimitError is a call refused by a rate limit: it says which limit
// and when to retry, and matches [ext.ErrBusy].
type RateLimitError = limits.Refusal

// ErrRateLimited is what every [RateLimitError] matches.
var ErrRateLimited = limits.ErrLimited

// RateLimited returns the calls refused by a rate limit since the start,
// by the limit's kind ("user_rate", "tool_concurrency", ...): the
// metrics' counter. Every kind is there, 0 when none.
func (h *Host) RateLimited() map[string]int64 { return h.limits.Refused() }

// startLimits starts the sweeper of idle users' limiter state, when there
// are limits; it runs until Close (h.bg).
func (h *Host) startLimits() {
	if h.limits == nil {
		return
	}
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		t := time.NewTicker(min(max(h.limits.Idle()/4, time.Second), time.Minute))
		defer t.Stop()
		for {
			select {
			case <-h.life.Done():
				return
			case <-t.C:
			}
			h.limits.Sweep()
		}
	}()
}
