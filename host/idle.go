package host

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"
)

// busyUser counts a call of user in flight until the returned function
// runs; a user with a call in flight is never idle.
func (h *Host) busyUser(user string) (leave func()) {
	h.mu.Lock()
	h.busy[user]++
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		if h.busy[user]--; h.busy[user] <= 0 {
			delete(h.busy, user)
		}
		if _, ok := h.active[user]; ok {
			h.seen[user] = time.Now()
		}
		h.mu.Unlock()
	}
}

// watchIdle deactivates the users who went idle: no call in flight, no
// resource subscription of a session and no request for
// services.idleMinutes, counted from the end of their activation or their
// last request, whichever is later. An open session that says nothing
// does not keep its user awake: the processes stop by their own clock.
// Their connections close and their processes stop, so that the slots of
// services.maxProcesses free up for others (a user whose connect waits for
// one gets it; one who was quarantined for want of one is refreshed at
// once, slots.go). The user's tools stay listed while they sleep (the
// registry keeps them, see registry.sleep), so their sessions hear no
// tools/list_changed and nothing wakes them but their next request. It
// runs until Close.
func (h *Host) watchIdle() {
	defer h.bg.Done()
	t := time.NewTicker(idleTick(h.userIdle))
	defer t.Stop()
	for {
		select {
		case <-h.life.Done():
			return
		case <-t.C:
		}
		h.deactivateIdle()
	}
}

// idleTick is how often watchIdle looks: a quarter of the idle time,
// between 20 ms and 30 s (at the default 10 minutes, a user sleeps within
// 10.5 minutes of their last request).
func idleTick(idle time.Duration) time.Duration {
	return min(max(idle/4, 20*time.Millisecond), 30*time.Second)
}

func (h *Host) deactivateIdle() {
	subscribed := h.sess.subscribed()
	now := time.Now()
	type job struct {
		user string
		a    *activation
		done chan struct{}
	}
	var jobs []job
	h.mu.Lock()
	for u, a := range h.active {
		if h.busy[u] > 0 || subscribed[u] || now.Sub(h.seen[u]) < h.userIdle || !isClosed(a.done) {
			continue
		}
		jobs = append(jobs, job{u, a, h.beginDeactivationLocked(u)})
	}
	h.mu.Unlock()
	var g errgroup.Group
	g.SetLimit(8)
	for _, j := range jobs {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(h.life, activationTimeout)
			defer cancel()
			if err := h.deactivate(ctx, j.user, j.a, j.done); err != nil {
				h.logger.Warn("deactivating an idle user failed", "user", j.user, "error", err)
			} else {
				h.logger.Info("deactivated an idle user", "user", j.user, "idle", h.userIdle)
			}
			return nil
		})
	}
	_ = g.Wait() // each failure is logged; the other users are deactivated
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
