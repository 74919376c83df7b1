package host

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// FleetEntry is a user's resource that is not well, in the operator's
// fleet view ([Host.Fleet]).
type FleetEntry = api.FleetEntry

// wellStates are the states the fleet view leaves out: everything else an
// extension reports (quarantined, needs sign-in, error, unavailable, and
// any state an extension adds later) is shown.
var wellStates = map[string]bool{"connected": true, "retiring": true}

// fleet keeps, per user, the entries that were not well when the user
// was last deactivated (in memory: a restart of the host forgets them,
// and each user's next activation shows theirs again). Guarded by mu;
// never held across a call to an extension.
type fleet struct {
	mu     sync.Mutex
	byUser map[string][]FleetEntry
}

// notWell returns the entries of st that are not well, seen at now.
func notWell(st []StatusEntry, active bool, now time.Time) []FleetEntry {
	var out []FleetEntry
	for _, s := range st {
		if !wellStates[s.State] {
			out = append(out, FleetEntry{StatusEntry: s, Active: active, Seen: now})
		}
	}
	return out
}

// remember keeps what of user is not well in the extensions that report
// status, before the user is deactivated; it forgets the user when all
// is well.
func (h *Host) remember(ctx context.Context, user string) {
	var recs []FleetEntry
	now := time.Now()
	for _, e := range sortedExtensions(h.exts) {
		if !e.descriptor().Has(ext.CapabilityStatus) {
			continue
		}
		// The operator's view of the user (Status of every user) words
		// reasons the user is not shown; it is kept for the operator only.
		st, err := h.statusOf(ctx, e, "")
		if err != nil {
			h.logger.Warn("fleet: reading the status of a user being deactivated failed", "user", user, "extension", e.name, "error", err)
			continue
		}
		st = slices.DeleteFunc(st, func(s StatusEntry) bool { return s.User != user })
		recs = append(recs, notWell(st, false, now)...)
	}
	h.fleet.mu.Lock()
	defer h.fleet.mu.Unlock()
	if len(recs) == 0 {
		delete(h.fleet.byUser, user)
		return
	}
	if h.fleet.byUser == nil {
		h.fleet.byUser = map[string][]FleetEntry{}
	}
	h.fleet.byUser[user] = recs
}

// forget drops what the fleet view keeps of user (deleted).
func (h *Host) forget(user string) {
	h.fleet.mu.Lock()
	defer h.fleet.mu.Unlock()
	delete(h.fleet.byUser, user)
}

// Fleet is the operator's fleet view: every user's resources that are
// not well, with their reasons (the operator's wording, which may say
// more than the user's own status), live for the users active now and,
// for the others, as last seen before they were deactivated. A user's
// kept entries are dropped once they are active again (their live
// status then speaks for them) and when they are deleted. Operator only:
// it holds every user's IDs and reasons, never a secret.
func (h *Host) Fleet(ctx context.Context) ([]FleetEntry, error) {
	active := map[string]bool{}
	for _, u := range h.ActiveUsers() {
		active[u] = true
	}
	live, err := h.Status(ctx, "")
	if err != nil {
		return nil, err
	}
	out := notWell(live, true, time.Now())
	h.fleet.mu.Lock()
	for u, recs := range h.fleet.byUser {
		if active[u] {
			delete(h.fleet.byUser, u)
			continue
		}
		out = append(out, recs...)
	}
	h.fleet.mu.Unlock()
	slices.SortFunc(out, func(a, b FleetEntry) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		if c := strings.Compare(a.Extension, b.Extension); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if out == nil {
		out = []FleetEntry{}
	}
	return out, nil
}
