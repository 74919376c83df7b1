package host

import (
	"fmt"
	"slices"
	"testing"
)

// TestSlotQueueOldestFirst: the users refused a process slot are woken
// oldest first, each once however often refused, the inactive ones
// dropped; one whose connect got a slot leaves the queue; the queue is
// bounded (beyond, a refused user waits for its backoff).
func TestSlotQueueOldestFirst(t *testing.T) {
	q := newSlotQueue()
	w := func(u string) slotWaiter { return slotWaiter{ext: "mcp", user: u} }
	for _, u := range []string{"u1", "u2", "u3", "u1", "u4", "u5"} {
		q.add(w(u))
	}
	q.remove(w("u4"))
	got := q.take(2, func(x slotWaiter) bool { return x.user != "u2" })
	if want := []slotWaiter{w("u1"), w("u3")}; !slices.Equal(got, want) {
		t.Errorf("first wake %v, want %v (oldest first, u2 inactive)", got, want)
	}
	q.add(w("u1")) // refused again: at the end
	if got, want := q.take(8, func(slotWaiter) bool { return true }), []slotWaiter{w("u5"), w("u1")}; !slices.Equal(got, want) {
		t.Errorf("second wake %v, want %v", got, want)
	}
	for i := range maxSlotWaiters + 10 {
		q.add(w(fmt.Sprint("v", i)))
	}
	if n := len(q.take(2*maxSlotWaiters, func(slotWaiter) bool { return true })); n != maxSlotWaiters {
		t.Errorf("%d waiters kept, want the bound %d", n, maxSlotWaiters)
	}
}
