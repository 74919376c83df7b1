package extmcp

import (
	"context"
	"encoding/json"

	"github.com/agenthost/agenthost/ext"
)

// The activation's snapshot (ext.CapabilitySnapshot): the host hands
// Activate the user's settings and secrets for this extension, so the
// plan of that activation (switches, own servers, catalog entries, tokens,
// secret inputs, sign-ins) is read from it instead of calling back. Every
// other refresh (a retry, a list change, ReconcileAll, a finished
// sign-in) reads through the host's store as before, and so does anything
// of the operator's (@operator's secrets). The snapshot lives only for
// planning: Connect drops it from its context, so a connection's later
// reads (a token refresh's check of the stored grant) see the store.

// snapKey is the context key of the snapshot ext-mcp plans from.
type snapKey struct{}

// activationSnap is the host's snapshot of one user.
type activationSnap struct {
	user string
	snap *ext.UserSnapshot
}

// withSnapshot returns ctx carrying snap as user's; a nil snap hides one
// ctx carried.
func withSnapshot(ctx context.Context, user string, snap *ext.UserSnapshot) context.Context {
	if snap == nil {
		if ctx.Value(snapKey{}) == nil {
			return ctx
		}
		return context.WithValue(ctx, snapKey{}, (*activationSnap)(nil))
	}
	return context.WithValue(ctx, snapKey{}, &activationSnap{user: user, snap: snap})
}

// snapshotOf returns the snapshot ctx carries for user, or nil.
func snapshotOf(ctx context.Context, user string) *ext.UserSnapshot {
	s, _ := ctx.Value(snapKey{}).(*activationSnap)
	if s == nil || s.user != user {
		return nil
	}
	return s.snap
}

// readSetting returns user's values of section: from the activation's
// snapshot when it holds the section, else from the host's store.
func readSetting(ctx context.Context, h ext.Host, user, section string) (json.RawMessage, error) {
	if v, ok := snapshotOf(ctx, user).Setting(section); ok {
		return v, nil
	}
	return h.UserStore(user).Settings().Get(ctx, section)
}

// readSecret returns owner's secret name ([ext.ErrNotFound] when unset):
// from the activation's snapshot when owner is the user it was taken for,
// else from the host's store.
func readSecret(ctx context.Context, h ext.Host, owner, name string) (string, error) {
	if s := snapshotOf(ctx, owner); s != nil {
		return s.Secret(name)
	}
	return h.UserStore(owner).Secrets().Get(ctx, name)
}
