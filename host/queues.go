package host

import "time"

// The kinds of calls counted in flight ([Queues.InFlight]).
const (
	inflightTool = iota
	inflightPrompt
	inflightResource
)

// inflightKinds names the kinds, in their order: bounded metric labels.
var inflightKinds = [...]string{"tool", "prompt", "resource"}

// Queues are the depths of the host's queues at one moment, for /metrics
// (README "Metrics"): bounded, no user in them.
type Queues struct {
	// AuditQueued is the audit records waiting for the writer; AuditDropped
	// those dropped since the start with its queue full (a counter). Both
	// 0 with the audit log off.
	AuditQueued  int
	AuditDropped int64
	// ApprovalsWaiting is the calls waiting for a person's approval.
	ApprovalsWaiting int
	// InFlight is the calls running now by kind: "tool", "prompt" and
	// "resource" (every kind is there, 0 when none).
	InFlight map[string]int64
}

// Queues returns the depths of the host's queues now. Safe for
// concurrent use; cheap (counters and one lock of the approvals).
func (h *Host) Queues() Queues {
	q := Queues{InFlight: make(map[string]int64, len(inflightKinds))}
	for i, k := range inflightKinds {
		q.InFlight[k] = h.inflight[i].Load()
	}
	if h.audit != nil {
		s := h.audit.Stats()
		q.AuditQueued, q.AuditDropped = s.Queued, s.Dropped
	}
	q.ApprovalsWaiting = h.approvals.waiting()
	return q
}

// waiting is the calls waiting for approval now (state "waiting", not
// expired).
func (a *approvals) waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	now, n := time.Now(), 0
	for _, p := range a.pending {
		if p.state == "waiting" && now.Sub(p.Created) <= pendingTTL {
			n++
		}
	}
	return n
}
