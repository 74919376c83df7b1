package api

import "sync"

// Callbacks is a set of registered functions called with a value, such
// as the revocation listeners of a token store: the surfaces register
// theirs with Add and the store calls Run after it committed a change.
// The zero value is ready to use; it is safe for concurrent use (and is
// the one type here that must not be copied).
type Callbacks[T any] struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(T)
}

// Add registers fn. It runs on the goroutine that calls Run and must
// return quickly. The returned function unregisters fn; it may be called
// more than once.
func (c *Callbacks[T]) Add(fn func(T)) (cancel func()) {
	c.mu.Lock()
	if c.fns == nil {
		c.fns = map[int]func(T){}
	}
	id := c.next
	c.next++
	c.fns[id] = fn
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.fns, id)
		c.mu.Unlock()
	}
}

// Run calls every registered function with v, outside the lock (a
// function may Add or cancel).
func (c *Callbacks[T]) Run(v T) {
	c.mu.Lock()
	fns := make([]func(T), 0, len(c.fns))
	for _, fn := range c.fns {
		fns = append(fns, fn)
	}
	c.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}
