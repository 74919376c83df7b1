package host

import (
	"time"

	"github.com/agenthost/agenthost/host/internal/audit"
)

// Hooks for the external tests: the idle clock at its real (default)
// length, without waiting for it.

// UserIdle is the idle time the host counts (services.idleMinutes) and
// how often its watcher looks.
func (h *Host) UserIdle() (idle, tick time.Duration) { return h.userIdle, idleTick(h.userIdle) }

// AgeUser moves user's idle clock d into the past, as if they had been
// silent for d longer.
func (h *Host) AgeUser(user string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.seen[user]; ok {
		h.seen[user] = t.Add(-d)
	}
}

// DeactivateIdleNow is one look of the idle watcher.
func (h *Host) DeactivateIdleNow() { h.deactivateIdle() }

// ListedTools is user's tool list as the registry keeps it, without
// activating them.
func (h *Host) ListedTools(user string) []Tool { return h.reg.list(user) }

// SetScryptWorkFactor makes Backup derive its key with 2^n scrypt rounds
// until the test ends (not for parallel tests).
func SetScryptWorkFactor(t interface{ Cleanup(func()) }, n int) {
	old := scryptWorkFactor
	scryptWorkFactor = n
	t.Cleanup(func() { scryptWorkFactor = old })
}

// AuditHash is the audit log's hash of a tool's definition.
func AuditHash(t Tool) string {
	return audit.ToolHash(t.Name, t.Title, t.Description, t.InputSchema, t.OutputSchema, t.Annotations)
}
