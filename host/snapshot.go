package host

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agenthost/agenthost/ext"
)

// userSnapshot reads user's settings (every user section of e) and
// secrets for e, once, for [ext.UserLifecycle.Activate] of an extension
// that lists [ext.CapabilitySnapshot]; nil for any other. The extension
// then needs no callback for them while it activates (DESIGN.md §4).
// The reads go to the stores directly, as the extension's own would.
func (h *Host) userSnapshot(ctx context.Context, e *extension, user string) (*ext.UserSnapshot, error) {
	d := e.descriptor()
	if !d.Has(ext.CapabilitySnapshot) {
		return nil, nil
	}
	us := &userStore{h: h, ext: e.name, user: user}
	snap := &ext.UserSnapshot{Settings: map[string]json.RawMessage{}, Secrets: map[string]string{}}
	for _, s := range d.Settings {
		if s.Scope != "user" {
			continue
		}
		v, err := us.Settings().Get(ctx, s.ID)
		if err != nil {
			return nil, fmt.Errorf("reading section %q of %q for extension %q: %w", s.ID, user, e.name, err)
		}
		snap.Settings[s.ID] = v
	}
	names, err := us.Secrets().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the secrets of %q for extension %q: %w", user, e.name, err)
	}
	for _, n := range names {
		v, err := us.Secrets().Get(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("reading secret %q of %q for extension %q: %w", n, user, e.name, err)
		}
		snap.Secrets[n] = v
	}
	return snap, nil
}

// activationContext is the context of e's Activate for user: the user's
// groups and, for an extension that lists [ext.CapabilitySnapshot], their
// snapshot. A snapshot that cannot be read is left out (logged): the
// extension reads through its store and meets the error itself.
func (h *Host) activationContext(ctx context.Context, e *extension, user string) context.Context {
	ctx = h.withGroups(ctx, user)
	snap, err := h.userSnapshot(ctx, e, user)
	if err != nil {
		e.logger.Warn("activating without the user's snapshot", "user", user, "error", err)
		return ctx
	}
	if snap != nil {
		ctx = ext.WithUserSnapshot(ctx, snap)
	}
	return ctx
}
