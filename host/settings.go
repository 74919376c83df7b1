package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

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
// value is refused with [settings.FieldErrors] naming each field, values
// the extension refuses ([ext.SettingsValidator]) with its error, whether
// or not the user is active; either way nothing is stored.
func (h *Host) SetSettings(ctx context.Context, user, extName, section string, values json.RawMessage) (err error) {
	defer h.auditChange(user, "settings "+extName+"/"+section, time.Now(), &err)
	if err := checkUser(user); err != nil {
		return err
	}
	return h.setSettings(ctx, extName, user, section, values, true)
}

// patchAttempts bounds how often a patch is merged again because another
// write changed the values while the extension validated the merge.
const patchAttempts = 4

// PatchSettings changes some of a user's values of one settings section:
// patch is a JSON Merge Patch (RFC 7396) over the stored values, so a key
// it names is set, a key it sets to null goes back to its default, and a
// key it leaves out keeps its value (a secret field in it: a string sets,
// null clears, absent keeps). The merged values are validated as
// [Host.SetSettings] validates, stored, and the user is refreshed. The
// merge is stored only if no other write of this host changed the values
// since they were read (else it is merged again), so two patches never
// lose each other's keys.
func (h *Host) PatchSettings(ctx context.Context, user, extName, section string, patch json.RawMessage) (err error) {
	defer h.auditChange(user, "settings "+extName+"/"+section, time.Now(), &err)
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
	if err := h.patchValues(ctx, f, extName, user, section, plainPatch, secretVals); err != nil {
		return err
	}
	return h.refreshUser(ctx, extName, user)
}

// patchValues merges plainPatch into the stored values, has them checked
// and stores them, with the user's writes of the section held off.
func (h *Host) patchValues(ctx context.Context, f settings.Form, extName, user, section string,
	plainPatch json.RawMessage, secretVals map[string]*string) error {
	unlock, err := h.userWrites.lock(ctx, extName+"\x00"+user+"\x00"+section)
	if err != nil {
		return fmt.Errorf("waiting for another write of %s/%s: %w", extName, section, err)
	}
	defer unlock()
	for attempt := 1; ; attempt++ {
		current, err := h.settings.Get(ctx, extName, user, section)
		if err != nil {
			return mapSettingsErr(err)
		}
		base := current
		if len(bytes.TrimSpace(base)) == 0 || bytes.Equal(bytes.TrimSpace(base), []byte("null")) {
			base = json.RawMessage("{}")
		}
		merged, err := jsonpatch.MergePatch(base, plainPatch)
		if err != nil {
			return ext.Mark(fmt.Errorf("merging the patch into the values of %s/%s: %w", extName, section, err), ext.ErrInvalidArgument)
		}
		normalized, err := h.checkValues(ctx, f, extName, user, section, merged)
		if err != nil {
			return err
		}
		// The extension was asked without settingsWrite (never held
		// across an extension call), and the extension may write its
		// users' values itself: store only if nothing changed since.
		h.settingsWrite.Lock()
		now, err := h.settings.Get(ctx, extName, user, section)
		if err == nil && !bytes.Equal(now, current) {
			h.settingsWrite.Unlock()
			if attempt == patchAttempts {
				return fmt.Errorf("the values of %s/%s kept changing while the patch was merged: %w", extName, section, ext.ErrBusy)
			}
			continue
		}
		if err == nil {
			err = h.storeSettings(ctx, extName, user, section, normalized, secretVals)
		} else {
			err = mapSettingsErr(err)
		}
		h.settingsWrite.Unlock()
		return err
	}
}

// setSettings stores values of a section; byUser marks the user's own
// write (checked by the extension, then the user is refreshed), not one of
// the extension itself through its host services.
func (h *Host) setSettings(ctx context.Context, extName, user, section string, values json.RawMessage, byUser bool) error {
	f, err := h.form(extName, section)
	if err != nil {
		return err
	}
	plain, secretVals, err := settings.SplitSecrets(f, values)
	if err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	if !byUser {
		normalized, err := settings.ValidateValues(f, plain)
		if err != nil {
			return ext.Mark(err, ext.ErrInvalidArgument)
		}
		h.settingsWrite.Lock()
		defer h.settingsWrite.Unlock()
		return h.storeSettings(ctx, extName, user, section, normalized, secretVals)
	}
	// The user's writes of the section, checked by the extension, one at a
	// time (not across the refresh).
	unlock, err := h.userWrites.lock(ctx, extName+"\x00"+user+"\x00"+section)
	if err != nil {
		return fmt.Errorf("waiting for another write of %s/%s: %w", extName, section, err)
	}
	normalized, err := h.checkValues(ctx, f, extName, user, section, plain)
	if err == nil {
		h.settingsWrite.Lock()
		err = h.storeSettings(ctx, extName, user, section, normalized, secretVals)
		h.settingsWrite.Unlock()
	}
	unlock()
	if err != nil {
		return err
	}
	return h.refreshUser(ctx, extName, user)
}

// checkValues validates a user's plain values against the form, then, when
// the extension has the "validate" capability, asks it; it returns the
// normalized values.
func (h *Host) checkValues(ctx context.Context, f settings.Form, extName, user, section string, plain json.RawMessage) (json.RawMessage, error) {
	normalized, err := settings.ValidateValues(f, plain)
	if err != nil {
		return nil, ext.Mark(err, ext.ErrInvalidArgument)
	}
	e := h.exts[extName]
	if e == nil || !e.descriptor().Has(ext.CapabilityValidate) {
		return normalized, nil
	}
	err = use(ctx, e, ext.CapabilityValidate, func() string { return fmt.Sprintf("checking the values of section %q", section) },
		func(v ext.SettingsValidator) error {
			return v.ValidateSettings(h.withGroups(ctx, user), &ext.ValidateSettingsRequest{User: user, Section: section, Values: normalized})
		})
	if err != nil {
		return nil, err
	}
	return normalized, nil
}

// storeSettings stores normalized values, then the secret fields (a value
// sets, nil clears). The caller holds settingsWrite.
func (h *Host) storeSettings(ctx context.Context, extName, user, section string,
	normalized json.RawMessage, secretVals map[string]*string) error {
	if err := h.settings.Set(ctx, extName, user, section, normalized); err != nil {
		return mapSettingsErr(err)
	}
	names := make([]string, 0, len(secretVals))
	for n := range secretVals {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ss := (&userStore{h: h, ext: extName, user: user}).Secrets()
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
func (h *Host) SetSecret(ctx context.Context, user, extName, name, value string) (err error) {
	defer h.auditChange(user, "secret set "+extName+"/"+name, time.Now(), &err)
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
func (h *Host) DeleteSecret(ctx context.Context, user, extName, name string) (err error) {
	defer h.auditChange(user, "secret delete "+extName+"/"+name, time.Now(), &err)
	if err := h.checkSecretOwner(user, extName); err != nil {
		return err
	}
	if err := (&userStore{h: h, ext: extName, user: user}).Secrets().Delete(ctx, name); err != nil {
		return err
	}
	return h.refreshAfterSecret(ctx, user, extName)
}

// OperatorSecret reads an operator secret of an extension: for the host's
// own use (the OpenID Connect client secret), never shown.
func (h *Host) OperatorSecret(ctx context.Context, extName, name string) (string, error) {
	if err := h.checkSecretOwner(OperatorUser, extName); err != nil {
		return "", err
	}
	return (&userStore{h: h, ext: extName, user: OperatorUser}).Secrets().Get(ctx, name)
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

// keyedLock is a set of mutexes by key, each taken as long as a context
// allows; an unused key takes no memory. Safe for concurrent use.
type keyedLock struct {
	mu   sync.Mutex
	keys map[string]*keyedEntry
}

type keyedEntry struct {
	sem  chan struct{} // holds a token while the key is locked
	refs int           // holders and waiters
}

// lock takes key's mutex, or fails when ctx ends first; unlock releases
// it.
func (k *keyedLock) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*keyedEntry{}
	}
	e := k.keys[key]
	if e == nil {
		e = &keyedEntry{sem: make(chan struct{}, 1)}
		k.keys[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.keys, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.sem <- struct{}{}:
		return func() { <-e.sem; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
