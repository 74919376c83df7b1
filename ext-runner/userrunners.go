package extrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/ext"
)

// SectionRunners is the user's settings section of their own runners
// (when the operator sets allowUserRunners); its one field, "runners",
// is a JSON object of runners by name, as the operator's runners less
// "user" (always the user's own) and choosing among the operator's
// profiles.
const SectionRunners = "runners"

const runnersField = "runners"

// runnersForm is the section's form (settings descriptor v1): a JSON
// editor.
var runnersForm = json.RawMessage(`{"v":1,"root":{"type":"form","children":[{"type":"longtext","name":"runners",` +
	`"label":"Your runners","syntax":"json","lang":"json",` +
	`"help":"Agent sessions the host starts for you: by name, the servers (and tool globs) a session may use, one of the operator's profiles, the prompt, and when (schedule, resource). Only if the operator allows it.",` +
	`"placeholder":"{\"digest\": {\"servers\": [\"notes\"], \"profile\": \"claude\", \"prompt\": \"Summarise my notes.\", \"schedule\": \"0 18 * * *\", \"timeLimit\": \"10m\"}}"}]}}`)

var (
	_ ext.UserLifecycle     = (*Extension)(nil)
	_ ext.SettingsValidator = (*Extension)(nil)
)

// parseUserRunners reads a user's runners (the section's field text): a
// runner that is broken comes back in bad, the error naming it and its
// field; an error is the text itself.
func parseUserRunners(cfg *Config, user, text string) (map[string]*Runner, map[string]error, error) {
	runners := map[string]*Runner{}
	if strings.TrimSpace(text) == "" {
		return runners, nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&runners); err != nil {
		return nil, nil, fmt.Errorf("your runners: %w", err)
	}
	bad := map[string]error{}
	for name, r := range runners {
		switch {
		case checkName(name) != nil:
			bad[name] = checkName(name)
		case r == nil:
			bad[name] = fmt.Errorf("runner %q: empty", name)
		case r.User != "" && r.User != user:
			bad[name] = fmt.Errorf("runner %q: user %q: your runners act as you", name, r.User)
		case cfg.Runners[name] != nil && cfg.Runners[name].User == user:
			bad[name] = fmt.Errorf("runner %q: the operator has a runner of yours by that name", name)
		default:
			r.User = user
			if err := r.check(cfg, false); err != nil {
				bad[name] = fmt.Errorf("runner %q: %w", name, err)
			}
		}
	}
	return runners, bad, nil
}

// ValidateSettings implements [ext.SettingsValidator]: a user's runners
// are refused, with every broken one named, before they are stored.
func (e *Extension) ValidateSettings(_ context.Context, req *ext.ValidateSettingsRequest) error {
	if req.Section != SectionRunners {
		return nil
	}
	e.mu.Lock()
	cfg := e.cfg
	e.mu.Unlock()
	if cfg == nil {
		return fmt.Errorf("ext-runner is not configured yet: %w", ext.ErrUnavailable)
	}
	var vals map[string]any
	_ = json.Unmarshal(req.Values, &vals)
	text, _ := vals[runnersField].(string)
	if !cfg.AllowUserRunners && strings.TrimSpace(text) != "" {
		return fmt.Errorf("the operator does not let users declare runners (allowUserRunners): %w", ext.ErrInvalidArgument)
	}
	_, bad, err := parseUserRunners(cfg, req.User, text)
	if err != nil {
		return fmt.Errorf("%v: %w", err, ext.ErrInvalidArgument)
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(bad)) {
		errs = append(errs, bad[n])
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v: %w", errors.Join(errs...), ext.ErrInvalidArgument)
	}
	return nil
}

// Activate implements [ext.UserLifecycle]: it (re)reads the user's own
// runners from their settings and replaces the ones it had (running
// sessions finish; the old triggers stop). The host calls it at a user's
// first use and after each change of their settings: a user's runners
// are scheduled from then on, not from the host's start.
func (e *Extension) Activate(ctx context.Context, user string) error {
	e.mu.Lock()
	cfg := e.cfg
	e.mu.Unlock()
	if cfg == nil {
		return fmt.Errorf("ext-runner is not configured yet: %w", ext.ErrUnavailable)
	}
	var runners map[string]*Runner
	bad := map[string]error{}
	if cfg.AllowUserRunners {
		raw, err := e.host.UserStore(user).Settings().Get(ctx, SectionRunners)
		if err != nil {
			return fmt.Errorf("reading %s's runners: %w", user, err)
		}
		var vals map[string]any
		_ = json.Unmarshal(raw, &vals)
		text, _ := vals[runnersField].(string)
		if runners, bad, err = parseUserRunners(cfg, user, text); err != nil {
			// The whole text is broken (the form should have refused it).
			e.log.Warn("a user's runners", "user", user, "err", err)
			runners = nil
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	for k, rs := range e.runners {
		if rs.own && rs.user == user {
			if rs.stop != nil {
				rs.stop()
			}
			delete(e.runners, k)
		}
	}
	for name, r := range runners {
		rs := &runnerState{name: name, user: user, cfg: r, own: true, err: bad[name], profile: cfg.Profiles[r.Profile]}
		if rs.err == nil && r.Disabled {
			rs.err = errors.New("disabled")
		}
		if rs.err == nil && e.ua == nil {
			rs.err = errors.New("the operator has not granted ext-runner actAsUsers: true in its entry, which it needs to mint its sessions' tokens")
		}
		e.runners[runnerKey(user, name)] = rs
		if rs.err == nil {
			e.startTriggersLocked(rs)
		}
	}
	return nil
}

// Retire implements [ext.UserLifecycle]: a user's runners outlive their
// activity (a schedule runs while they are away), so nothing is retired.
func (e *Extension) Retire(context.Context, string, string) error { return nil }

// ReconcileAll implements [ext.UserLifecycle]: nothing to do (the
// operator's config is read at Configure).
func (e *Extension) ReconcileAll(context.Context) error { return nil }
