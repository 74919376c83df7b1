package host

import (
	"context"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/ext"
)

// RunAction asks extension extName for action on its status entry (user,
// name), for caller: a user, who may act only on an entry of their own,
// or [OperatorUser], who may act on any. The entry must offer the action
// in the extension's status at that moment ([ext.StatusEntry.Actions]);
// else, as for an entry the caller may not see, it is [ext.ErrNotFound],
// so that a user learns nothing of another's entries. The user is
// activated first (their own entries come from their settings). It
// returns the
// extension's answer, in words for the caller.
func (h *Host) RunAction(ctx context.Context, caller, extName, user, name, action string) (string, error) {
	if caller != OperatorUser {
		if err := checkUser(caller); err != nil {
			return "", err
		}
		if user == "" {
			user = caller
		}
		if user != caller {
			return "", fmt.Errorf("action %q on %s/%s: %w", action, extName, name, ext.ErrNotFound)
		}
	}
	if err := checkUser(user); err != nil {
		return "", err
	}
	e := h.exts[extName]
	if e == nil || !e.descriptor().Has(ext.CapabilityActions) || !e.descriptor().Has(ext.CapabilityStatus) {
		return "", fmt.Errorf("extension %q offers no actions: %w", extName, ext.ErrNotFound)
	}
	// The user's own entries (a user's runners, say) exist once the user
	// is active, as for agenthost status --user.
	if err := h.ensureActive(ctx, user); err != nil {
		return "", err
	}
	entries, err := h.statusOf(ctx, e, user)
	if err != nil {
		return "", err
	}
	found := false
	for _, s := range entries {
		found = found || (s.User == user && s.Name == name && slices.Contains(s.Actions, action))
	}
	if !found {
		return "", fmt.Errorf("%s of extension %q has no action %q for user %q now: %w", name, extName, action, user, ext.ErrNotFound)
	}
	var msg string
	err = use(ctx, e, ext.CapabilityActions, func() string { return "running action " + action },
		func(ar ext.ActionRunner) (err error) {
			msg, err = ar.RunAction(ctx, &ext.ActionRequest{Caller: caller, User: user, Name: name, Action: action})
			return err
		})
	if err == nil {
		h.recordAction(caller, extName, user, name, action)
	}
	return msg, err
}
