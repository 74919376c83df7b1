package host

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/fleetdb"
)

// FleetEntry is a user's resource that is not well, in the operator's
// fleet view ([Host.Fleet]).
type FleetEntry = api.FleetEntry

// wellStates are the states the fleet view leaves out: everything else an
// extension reports (quarantined, needs sign-in, error, unavailable, and
// any state an extension adds later) is shown.
var wellStates = map[string]bool{"connected": true, "retiring": true}

// fleet keeps, per user, the entries that were not well when the user
// was last deactivated: in memory, written through to fleet.db so that a
// restart of the host remembers them (read back at New). Guarded by mu,
// which is held across the store's writes (deactivations and deletions
// are rare; the memory and the file change together) and never across a
// call to an extension. A store that cannot be opened or written is
// logged, naming the file, and the view goes on in memory.
type fleet struct {
	mu     sync.Mutex
	byUser map[string][]FleetEntry
	st     fleetdb.Store // nil: memory only
}

// openFleet opens fleet.db in dataDir and reads back what it keeps.
func (h *Host) openFleet(dataDir string) {
	path := filepath.Join(dataDir, fleetdb.FileName)
	st, err := fleetdb.OpenSQLite(path)
	if err != nil {
		h.logger.Error("fleet: the fleet view's memory of inactive users cannot be opened; it is kept in memory only (a restart forgets it)", "file", path, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(h.life, fleetTimeout)
	defer cancel()
	kept, err := st.All(ctx)
	if err != nil {
		h.logger.Warn("fleet: reading the fleet view's memory of inactive users", "file", path, "error", err)
	}
	h.fleet.mu.Lock()
	defer h.fleet.mu.Unlock()
	h.fleet.st, h.fleet.byUser = st, kept
}

// closeFleet closes fleet.db.
func (h *Host) closeFleet() error {
	h.fleet.mu.Lock()
	defer h.fleet.mu.Unlock()
	if h.fleet.st == nil {
		return nil
	}
	err := h.fleet.st.Close()
	h.fleet.st = nil
	if err != nil {
		return fmt.Errorf("closing the fleet database: %w", err)
	}
	return nil
}

// fleetTimeout bounds a write or read of fleet.db.
const fleetTimeout = 5 * time.Second

// keep writes user's entries (none: forgets the user) to the store, when
// there is one; h.fleet.mu is held.
func (h *Host) keep(user string, recs []FleetEntry) {
	if h.fleet.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.life), fleetTimeout)
	defer cancel()
	if err := h.fleet.st.Put(ctx, user, recs); err != nil {
		h.logger.Warn("fleet: writing the fleet view's memory of a user (kept in memory)", "user", user, "error", err)
	}
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
		// The memory mirrors the file (read back at New): a user it
		// does not hold has no row to delete.
		if _, kept := h.fleet.byUser[user]; kept {
			delete(h.fleet.byUser, user)
			h.keep(user, nil)
		}
		return
	}
	defer h.keep(user, recs)
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
	h.keep(user, nil) // also a row that did not decode at New
}

// Fleet is the operator's fleet view: every user's resources that are
// not well, with their reasons (the operator's wording, which may say
// more than the user's own status), live for the users active now and,
// for the others, as last seen before they were deactivated (kept across
// restarts in fleet.db). A user's
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
			h.keep(u, nil)
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
