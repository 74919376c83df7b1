package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/settings"
)

// validateForm checks a settings section when its extension registers it:
// an unknown node type, a duplicate name or a bad default is an error.
func validateForm(s ext.SettingsSection) error {
	f, err := settings.ParseForm(s.Form)
	if err != nil {
		return err
	}
	return settings.ValidateSection(settings.Section{ID: s.ID, Title: s.Title, Description: s.Description,
		Scope: settings.Scope(s.Scope), Form: f})
}

// Section is one settings section of an extension, as a UI renders it.
type Section = api.Section

// Sections lists every extension's settings sections, by extension name.
// It never fails; the error is there for surfaces that reach a host over a
// connection.
func (h *Host) Sections(context.Context) ([]Section, error) {
	var out []Section
	for _, e := range sortedExtensions(h.exts) {
		d := e.descriptor()
		if d == nil {
			continue
		}
		for _, s := range d.Settings {
			out = append(out, Section{Extension: e.name, ID: s.ID, Title: s.Title, Description: s.Description, Scope: s.Scope, Form: s.Form})
		}
	}
	return out, nil
}

func (h *Host) form(extName, section string) (settings.Form, error) {
	e := h.exts[extName]
	if e == nil {
		return settings.Form{}, fmt.Errorf("extension %q: %w", extName, ext.ErrNotFound)
	}
	for _, s := range e.descriptor().Settings {
		if s.ID == section {
			return settings.ParseForm(s.Form)
		}
	}
	return settings.Form{}, fmt.Errorf("extension %q has no settings section %q: %w", extName, section, ext.ErrNotFound)
}

// SettingsValues is a user's view of one section: the stored values and,
// for each secret field, whether it is set. Secrets are never read back.
type SettingsValues = api.SettingsValues

// GetSettings returns a user's values of one settings section and which of
// its secret fields are set.
func (h *Host) GetSettings(ctx context.Context, user, extName, section string) (*SettingsValues, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	f, err := h.form(extName, section)
	if err != nil {
		return nil, err
	}
	v, err := h.settings.Get(ctx, extName, user, section)
	if err != nil {
		return nil, mapSettingsErr(err)
	}
	out := &SettingsValues{Values: v}
	if names := settings.SecretNames(f); len(names) > 0 {
		stored, err := h.secrets.List(ctx, extName, user)
		if err != nil {
			return nil, mapSecretErr(err)
		}
		set := map[string]bool{}
		for _, n := range stored {
			set[n] = true
		}
		out.Secrets = map[string]bool{}
		for _, n := range names {
			out.Secrets[n] = set[n]
		}
	}
	return out, nil
}

// SetSettings validates a user's values of one settings section, stores
// them (secret fields go to the secrets store: a string sets, null
// clears, absent keeps), and refreshes the user in that extension. A bad
// value is refused with [settings.FieldErrors] naming each field, and
// nothing is stored.
func (h *Host) SetSettings(ctx context.Context, user, extName, section string, values json.RawMessage) error {
	if err := checkUser(user); err != nil {
		return err
	}
	return h.setSettings(ctx, extName, user, section, values, true)
}

// PatchSettings changes some of a user's values of one settings section:
// patch is a JSON Merge Patch (RFC 7396) over the stored values, so a key
// it names is set, a key it sets to null goes back to its default, and a
// key it leaves out keeps its value (a secret field in it: a string sets,
// null clears, absent keeps). The merged values are validated as
// [Host.SetSettings] validates, stored, and the user is refreshed. The
// read, the merge and the write are one atomic step of the settings store
// (its Update), so no concurrent write, of this process or another, is
// lost.
func (h *Host) PatchSettings(ctx context.Context, user, extName, section string, patch json.RawMessage) error {
	if err := checkUser(user); err != nil {
		return err
	}
	f, err := h.form(extName, section)
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(patch); len(t) == 0 || t[0] != '{' {
		return ext.Mark(settings.FieldErrors{{Msg: "a merge patch of a settings section must be a JSON object"}}, ext.ErrInvalidArgument)
	}
	plainPatch, secretVals, err := settings.SplitSecrets(f, patch)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	err = h.settings.Update(ctx, extName, user, section, func(old json.RawMessage) (json.RawMessage, error) {
		if t := bytes.TrimSpace(old); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			old = json.RawMessage("{}")
		}
		merged, err := jsonpatch.MergePatch(old, plainPatch)
		if err != nil {
			return nil, ext.Mark(fmt.Errorf("merging the patch into the values of %s/%s: %w", extName, section, err), ext.ErrInvalidArgument)
		}
		normalized, err := settings.ValidateValues(f, merged)
		if err != nil {
			return nil, ext.Mark(err, ext.ErrInvalidArgument)
		}
		return normalized, nil
	})
	if err != nil {
		return mapSettingsErr(err)
	}
	if err := h.storeSecrets(ctx, extName, user, secretVals); err != nil {
		return err
	}
	return h.refreshUser(ctx, extName, user)
}

func (h *Host) setSettings(ctx context.Context, extName, user, section string, values json.RawMessage, refresh bool) error {
	f, err := h.form(extName, section)
	if err != nil {
		return err
	}
	plain, secretVals, err := settings.SplitSecrets(f, values)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	normalized, err := settings.ValidateValues(f, plain)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	if err := h.settings.Set(ctx, extName, user, section, normalized); err != nil {
		return mapSettingsErr(err)
	}
	if err := h.storeSecrets(ctx, extName, user, secretVals); err != nil {
		return err
	}
	if refresh {
		return h.refreshUser(ctx, extName, user)
	}
	return nil
}

// storeSecrets stores a section's secret fields (a value sets, nil
// clears), in name order.
func (h *Host) storeSecrets(ctx context.Context, extName, user string, secretVals map[string]*string) error {
	names := make([]string, 0, len(secretVals))
	for n := range secretVals {
		names = append(names, n)
	}
	sort.Strings(names)
	ss := (&userStore{h: h, ext: extName, user: user}).Secrets()
	for _, n := range names {
		var err error
		if v := secretVals[n]; v != nil {
			err = ss.Set(ctx, n, *v)
		} else {
			err = ss.Delete(ctx, n)
		}
		if err != nil {
			return fmt.Errorf("storing secret field %q: %w", n, err)
		}
	}
	return nil
}

// SetSecret stores a secret of a user (or, with [OperatorUser], of the
// operator) for an extension, then refreshes the user there.
func (h *Host) SetSecret(ctx context.Context, user, extName, name, value string) error {
	if err := h.checkSecretOwner(user, extName); err != nil {
		return err
	}
	if err := (&userStore{h: h, ext: extName, user: user}).Secrets().Set(ctx, name, value); err != nil {
		return err
	}
	return h.refreshAfterSecret(ctx, user, extName)
}

// DeleteSecret removes a secret of a user (or of the operator) for an
// extension, then refreshes.
func (h *Host) DeleteSecret(ctx context.Context, user, extName, name string) error {
	if err := h.checkSecretOwner(user, extName); err != nil {
		return err
	}
	if err := (&userStore{h: h, ext: extName, user: user}).Secrets().Delete(ctx, name); err != nil {
		return err
	}
	return h.refreshAfterSecret(ctx, user, extName)
}

// SecretNames lists a user's (or the operator's) secret names for an
// extension; values are never returned.
func (h *Host) SecretNames(ctx context.Context, user, extName string) ([]string, error) {
	if err := h.checkSecretOwner(user, extName); err != nil {
		return nil, err
	}
	return (&userStore{h: h, ext: extName, user: user}).Secrets().List(ctx)
}

func (h *Host) checkSecretOwner(user, extName string) error {
	if user != OperatorUser {
		if err := checkUser(user); err != nil {
			return err
		}
	}
	if h.exts[extName] == nil {
		return fmt.Errorf("extension %q: %w", extName, ext.ErrNotFound)
	}
	return nil
}

// refreshAfterSecret refreshes the user, or every active user after an
// operator's secret changed.
func (h *Host) refreshAfterSecret(ctx context.Context, user, extName string) error {
	if user != OperatorUser {
		return h.refreshUser(ctx, extName, user)
	}
	e := h.exts[extName]
	if e == nil || !e.descriptor().Has(ext.CapabilityUsers) {
		return nil
	}
	return use(ctx, e, ext.CapabilityUsers, func() string { return "reconciling users" },
		func(ul ext.UserLifecycle) error { return ul.ReconcileAll(ctx) })
}

// refreshUser re-activates an active user in one extension after their
// settings or secrets changed.
func (h *Host) refreshUser(ctx context.Context, extName, user string) error {
	h.mu.Lock()
	_, active := h.active[user]
	h.mu.Unlock()
	e := h.exts[extName]
	if !active || e == nil || !e.descriptor().Has(ext.CapabilityUsers) {
		return nil
	}
	return h.activateOne(ctx, e, user)
}
