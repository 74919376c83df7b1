package host

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agenthost/agenthost/ext"
)

// validateForm checks a settings section's form at registration.
func validateForm(s ext.SettingsSection) error {
	var f struct {
		V    int             `json:"v"`
		Root json.RawMessage `json:"root"`
	}
	if err := json.Unmarshal(s.Form, &f); err != nil {
		return fmt.Errorf("form is not valid JSON: %w", err)
	}
	if f.V != 1 {
		return fmt.Errorf("form version %d, want 1", f.V)
	}
	if len(f.Root) == 0 {
		return fmt.Errorf("form has no root")
	}
	return nil
}

// SetSettings validates and stores a user's values of one settings section
// of an extension, then refreshes the user in that extension.
func (h *Host) SetSettings(ctx context.Context, user, extName, section string, values json.RawMessage) error {
	if err := checkUser(user); err != nil {
		return err
	}
	return h.setSettings(ctx, extName, user, section, values, true)
}

// GetSettings returns a user's values of one settings section.
func (h *Host) GetSettings(ctx context.Context, user, extName, section string) (json.RawMessage, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if _, err := h.section(extName, section); err != nil {
		return nil, err
	}
	return h.settings.Get(ctx, extName, user, section)
}

func (h *Host) section(extName, section string) (ext.SettingsSection, error) {
	e := h.exts[extName]
	if e == nil {
		return ext.SettingsSection{}, fmt.Errorf("extension %q: %w", extName, ext.ErrNotFound)
	}
	for _, s := range e.descriptor().Settings {
		if s.ID == section {
			return s, nil
		}
	}
	return ext.SettingsSection{}, fmt.Errorf("extension %q has no settings section %q: %w", extName, section, ext.ErrNotFound)
}

func (h *Host) setSettings(ctx context.Context, extName, user, section string, values json.RawMessage, refresh bool) error {
	if _, err := h.section(extName, section); err != nil {
		return err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(values, &obj); err != nil || obj == nil {
		return fmt.Errorf("settings of section %q must be a JSON object: %w", section, ext.ErrInvalidArgument)
	}
	if err := h.settings.Set(ctx, extName, user, section, values); err != nil {
		return err
	}
	if refresh {
		return h.refreshUser(ctx, extName, user)
	}
	return nil
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
