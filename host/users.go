package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/agenthost/agenthost/ext"
)

// ErrUserDisabled marks (errors.Is) the refusal of a disabled user's
// tools and calls; it is also ext.ErrPermission.
var ErrUserDisabled = errors.New("user is disabled")

// DisableUser refuses user's tools and calls until [Host.EnableUser] and
// deactivates them in every extension (their connections close and their
// processes stop), waiting for a deactivation already underway, so that
// when it returns nothing of user runs. The surfaces revoke the user's
// credentials; this is the host's half.
func (h *Host) DisableUser(ctx context.Context, user string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	h.mu.Lock()
	h.disabled[user] = true
	pending := h.deact[user]
	h.mu.Unlock()
	if pending != nil {
		select {
		case <-pending:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the deactivation of user %q: %w", user, ctx.Err())
		}
	}
	if err := h.Deactivate(ctx, user); err != nil {
		return fmt.Errorf("deactivating disabled user %q: %w", user, err)
	}
	h.logger.Info("user disabled: deactivated, and refused until enabled", "user", user)
	return nil
}

// EnableUser lets a user disabled with [Host.DisableUser] be activated
// again (by their next request).
func (h *Host) EnableUser(user string) {
	h.mu.Lock()
	delete(h.disabled, user)
	h.mu.Unlock()
}

// userDisabledLocked is the refusal of a disabled user, or nil.
func (h *Host) userDisabledLocked(user string) error {
	if h.disabled[user] {
		return ext.Mark(fmt.Errorf("user %q: %w", user, ErrUserDisabled), ext.ErrPermission)
	}
	return nil
}

// SetUserGroups records user's groups (from the host's users table: the
// provider's claim and the operator's), which the host passes to the
// extensions when it activates the user (see [ext.UserGroups]). When
// they change for an active user, the user is deactivated, so that their
// next request activates them again with the new groups and their
// catalog follows (a shared server lent to a group appears or goes; the
// session hears tools/list_changed then). A user not active gets them at
// their next activation.
func (h *Host) SetUserGroups(ctx context.Context, user string, groups []string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	groups = slices.Compact(slices.Sorted(slices.Values(groups)))
	h.mu.Lock()
	same := slices.Equal(h.groups[user], groups)
	if len(groups) == 0 {
		delete(h.groups, user)
	} else {
		h.groups[user] = groups
	}
	_, active := h.active[user]
	h.mu.Unlock()
	if !same && h.policy() != nil {
		// The tool policy's group rules now read differently: the
		// user's sessions list their tools again.
		h.reg.poke(user)
	}
	if !same {
		h.limits.Forget(user) // their next call takes their groups' limits
	}
	if same || !active {
		return nil
	}
	h.logger.Info("user's groups changed: deactivated, to be activated with them", "user", user, "groups", groups)
	return h.Deactivate(ctx, user)
}

// UserGroups returns the groups recorded for user ([Host.SetUserGroups]).
func (h *Host) UserGroups(user string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.groups[user])
}

// withGroups returns ctx carrying user's groups for an activation.
func (h *Host) withGroups(ctx context.Context, user string) context.Context {
	return ext.WithUserGroups(ctx, h.UserGroups(user))
}

// DeleteUserData removes what the host keeps of user: their settings and
// secrets in every extension and, with deleteFiles, their folder in the
// data folder (users/<user>/: their servers' files, sandboxes). The user
// must be disabled or deactivated first ([Host.DisableUser]). It returns
// the folder, kept or removed.
func (h *Host) DeleteUserData(ctx context.Context, user string, deleteFiles bool) (string, error) {
	if err := checkUser(user); err != nil {
		return "", err
	}
	dir := filepath.Join(h.dataDir, "users", user)
	h.forget(user)
	var errs []error
	if err := h.settings.DeleteUser(ctx, user); err != nil {
		errs = append(errs, fmt.Errorf("deleting the settings of user %q: %w", user, err))
	}
	if err := h.secrets.DeleteUser(ctx, user); err != nil {
		errs = append(errs, fmt.Errorf("deleting the secrets of user %q: %w", user, err))
	}
	if deleteFiles {
		if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("deleting the folder of user %q: %w", user, err))
		}
	}
	return dir, errors.Join(errs...)
}

// KnownUsers returns the users the settings store holds values of, in
// any extension: the users of an install from before the users table.
func (h *Host) KnownUsers(ctx context.Context) ([]string, error) {
	var out []string
	for name := range h.exts {
		us, err := h.settings.Users(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("listing the users of extension %q: %w", name, err)
		}
		out = append(out, us...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
