package mcpendpoint

import (
	"time"
)

// sweepEvery is how often the sweeper looks for idle sessions and
// expired leases: an eighth of the session timeout, within [5 ms, 1 min].
func (e *Endpoint) sweepEvery() time.Duration {
	d := time.Minute
	if e.timeout > 0 {
		d = min(d, max(e.timeout/8, 5*time.Millisecond))
	}
	return d
}

// sweep closes sessions idle past the timeout and lets go of the users
// whose stateless lease ended, until the endpoint closes. It is the only
// clock the sessions have, so an idle session costs no goroutine or timer.
func (e *Endpoint) sweep() {
	defer e.wg.Done()
	t := time.NewTicker(e.sweepEvery())
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case now := <-t.C:
			e.sweepOnce(now)
		}
	}
}

func (e *Endpoint) sweepOnce(now time.Time) {
	var idle []*session
	var leased []*userState
	e.mu.Lock()
	if e.timeout > 0 {
		cutoff := now.Add(-e.timeout).UnixNano()
		for _, s := range e.byID {
			if s.busy.Load() == 0 && s.lastUsed.Load() < cutoff {
				idle = append(idle, s)
			}
		}
	}
	for _, u := range e.users {
		if !u.lease.IsZero() && now.After(u.lease) {
			u.lease = time.Time{}
			leased = append(leased, u)
		}
	}
	e.mu.Unlock()
	for _, s := range idle {
		s.close("idle past the session timeout")
	}
	for _, u := range leased {
		e.release(u)
	}
}
