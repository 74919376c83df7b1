package catalog

import (
	"context"
	"slices"
	"sync"
)

// fifoLock is a mutex that hands itself to waiters in arrival order, so
// that a user's refreshes run one at a time and in the order they were
// asked for. Waiting honours a context.
type fifoLock struct {
	mu      sync.Mutex
	held    bool
	waiters []chan struct{}
}

// lock acquires l, or returns ctx's error without holding it.
func (l *fifoLock) lock(ctx context.Context) error {
	l.mu.Lock()
	if !l.held {
		l.held = true
		l.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		l.mu.Unlock()
		return err
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	select {
	case <-ch:
		// The lock was handed over just as ctx ended: pass it on.
		l.mu.Unlock()
		l.unlock()
	default:
		if i := slices.Index(l.waiters, ch); i >= 0 {
			l.waiters = slices.Delete(l.waiters, i, i+1)
		}
		l.mu.Unlock()
	}
	return ctx.Err()
}

// unlock releases l to the first waiter, if any.
func (l *fifoLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) > 0 {
		ch := l.waiters[0]
		l.waiters[0] = nil
		l.waiters = l.waiters[1:]
		close(ch) // held stays true: ownership passes to that waiter
		return
	}
	l.held = false
}
