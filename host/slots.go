package host

import (
	"context"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Users whose service connect was refused for want of a process slot
// (services.maxProcesses; their extension quarantines the server) wait in
// slotQueue, oldest first. When a slot frees, watchSlots refreshes the
// oldest of them in their extension, as many as processes could start (at
// most wakeBatch at a time), so that the server starts now instead of at
// its next backoff retry, which may be minutes away.
const (
	maxSlotWaiters = 1024 // beyond, a refused user waits for its backoff
	wakeBatch      = 8
)

type slotWaiter struct{ ext, user string }

// slotQueue is the waiters, oldest first, each once. It is safe for
// concurrent use.
type slotQueue struct {
	mu    sync.Mutex
	order []slotWaiter
	in    map[slotWaiter]bool
	added chan struct{} // holds a value once a waiter was queued
}

func newSlotQueue() *slotQueue {
	return &slotQueue{in: map[slotWaiter]bool{}, added: make(chan struct{}, 1)}
}

// add queues w at the end, unless it waits already or the queue is full.
func (q *slotQueue) add(w slotWaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.in[w] || len(q.order) >= maxSlotWaiters {
		return
	}
	q.in[w] = true
	q.order = append(q.order, w)
	select {
	case q.added <- struct{}{}:
	default:
	}
}

// remove forgets w (its connect got a slot).
func (q *slotQueue) remove(w slotWaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.in[w] {
		return
	}
	delete(q.in, w)
	q.order = slices.DeleteFunc(q.order, func(x slotWaiter) bool { return x == w })
}

// take removes and returns the n oldest waiters that keep passes; those
// it fails are dropped.
func (q *slotQueue) take(n int, keep func(slotWaiter) bool) []slotWaiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []slotWaiter
	i := 0
	for ; i < len(q.order) && len(out) < n; i++ {
		w := q.order[i]
		delete(q.in, w)
		if keep(w) {
			out = append(out, w)
		}
	}
	q.order = slices.Delete(q.order, 0, i)
	return out
}

// watchSlots wakes the users waiting for a process slot whenever one may
// have freed (or a waiter arrived while one was free). It runs until
// Close.
func (h *Host) watchSlots() {
	defer h.bg.Done()
	for {
		freed := h.services.Freed() // before waking: a slot freed meanwhile runs the loop again
		h.wakeSlotWaiters()
		select {
		case <-h.life.Done():
			return
		case <-freed:
		case <-h.slots.added:
		}
	}
}

// wakeSlotWaiters refreshes the oldest waiting users, as many as
// processes could start now (at most wakeBatch), in parallel, and returns
// when their refreshes have ended. A user no longer active is dropped; a
// refresh refused a slot again queues its user at the end.
func (h *Host) wakeSlotWaiters() {
	n := min(h.services.Available(), wakeBatch)
	if n == 0 {
		return
	}
	ws := h.slots.take(n, func(w slotWaiter) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		_, active := h.active[w.user]
		return active
	})
	var g errgroup.Group
	for _, w := range ws {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(h.life, activationTimeout)
			defer cancel()
			h.logger.Info("a service process slot freed: refreshing a user who waited for one", "extension", w.ext, "user", w.user)
			if err := h.refreshUser(ctx, w.ext, w.user); err != nil && h.life.Err() == nil {
				h.logger.Warn("refreshing a user who waited for a service process slot failed", "extension", w.ext, "user", w.user, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait() // each failure is logged; the others were refreshed
}
