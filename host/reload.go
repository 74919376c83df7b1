package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// ReloadResult is what a reload of the operator's file changed.
type ReloadResult = api.ReloadResult

// ReloadHook is a part of the host outside package host that takes a
// block of the operator's file in place (the TLS certificate of package
// serve). Prepare checks cfg, the new file, and readies the change
// without making it (an error refuses the whole reload); the commit it
// returns makes it, and may be nil when nothing changes.
type ReloadHook func(ctx context.Context, cfg *Config) (commit func(), err error)

// reloadState is the file as last (re)loaded, the reload hooks and the
// observers of reloads' outcomes; mu serializes reloads.
type reloadState struct {
	mu     sync.Mutex
	loaded *Config
	hooks  []ReloadHook
	seen   []func(ctx context.Context, err error)
}

// OnReloaded adds a function that every [Host.Reload] calls with its
// outcome (nil: done), such as a metric's counter.
func (h *Host) OnReloaded(f func(ctx context.Context, err error)) {
	h.reload.mu.Lock()
	defer h.reload.mu.Unlock()
	h.reload.seen = append(h.reload.seen, f)
}

// OnReload adds a hook that every [Host.Reload] runs (see [ReloadHook]).
func (h *Host) OnReload(hook ReloadHook) {
	h.reload.mu.Lock()
	defer h.reload.mu.Unlock()
	h.reload.hooks = append(h.reload.hooks, hook)
}

// inPlace lists the blocks of the operator's file (by their JSON name)
// that a reload can change without a restart, and says how; a change to
// any other block, including one added to [Config] later that has no rule
// here yet, is refused as needing a restart. "tls" takes a renewed
// certificate and key (files re-read; the new pair served to new
// connections), not TLS turned on or off; "extensions" hands each
// extension whose config block changed its new block; "policy" takes
// effect for the next listing and call (sessions told list_changed);
// "limits" is given to the limiter, which keeps users' buckets where a
// limit is unchanged.
var inPlace = map[string]bool{"tls": true, "extensions": true, "policy": true, "limits": true}

// Reload re-reads the operator's file and applies what changed in place:
// the TLS certificate and key (through the hooks of [Host.OnReload]), the
// tool policy and the rate limits (see inPlace), and
// each extension's config block, handed to an extension with
// [ext.Reconfigurer] (first as a dry run to every such extension, then
// for real) or else by restarting that extension with it. A file that
// does not parse, a block that cannot change in place (listen, dataDir,
// an extension's path, args, env or sha256, an extension added or
// removed, or any other block but tls, policy, limits and extensions) or a config block
// an extension refuses changes nothing: the error names each culprit and
// wraps [ext.ErrInvalidArgument]. Reloads are serialized, logged with
// what changed, and audited (kind "reload").
func (h *Host) Reload(ctx context.Context) (*ReloadResult, error) {
	h.reload.mu.Lock()
	defer h.reload.mu.Unlock()
	res, err := h.reloadLocked(ctx)
	rec := audit.Record{Kind: audit.KindReload, User: OperatorUser, Credential: "operator", Outcome: audit.OutcomeOK}
	if err != nil {
		rec.Outcome, rec.Reason = audit.OutcomeRefused, err.Error()
		h.logger.Warn("reload refused: nothing changed", "error", err)
	} else {
		rec.Tool = strings.Join(res.Changed, ",")
		h.logger.Info("reloaded the operator's file", "changed", res.Changed, "restarted", res.Restarted)
	}
	h.AuditEvent(rec)
	for _, f := range h.reload.seen {
		f(ctx, err)
	}
	return res, err
}

// reloadErr marks a refused reload.
func reloadErr(errs ...error) error {
	return fmt.Errorf("reload refused, nothing changed: %w", ext.Mark(errors.Join(errs...), ext.ErrInvalidArgument))
}

func (h *Host) reloadLocked(ctx context.Context) (*ReloadResult, error) {
	old := h.reload.loaded
	if old.file == "" {
		return nil, fmt.Errorf("reload: this host was not started from a file: %w", ext.ErrUnimplemented)
	}
	cfg, err := LoadConfig(old.file)
	if err != nil {
		return nil, reloadErr(err)
	}
	res := &ReloadResult{Changed: []string{}}
	var refused []error
	// Every block but the in-place ones must be as it was.
	t := reflect.TypeFor[Config]()
	ov, nv := reflect.ValueOf(old).Elem(), reflect.ValueOf(cfg).Elem()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" || inPlace[name] {
			continue
		}
		if !reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			refused = append(refused, fmt.Errorf("%s: cannot change without a restart of the host", name))
		}
	}
	if (old.TLS.CertFile == "") != (cfg.TLS.CertFile == "") {
		refused = append(refused, errors.New("tls: turning TLS on or off cannot be done without a restart of the host"))
	} else if old.TLS != cfg.TLS {
		res.Changed = append(res.Changed, "tls")
	}
	policyChanged := !reflect.DeepEqual(old.Policy, cfg.Policy)
	if policyChanged {
		res.Changed = append(res.Changed, "policy")
	}
	limitsChanged := !reflect.DeepEqual(old.Limits, cfg.Limits)
	if limitsChanged {
		res.Changed = append(res.Changed, "limits")
	}
	changed, errs := h.extensionChanges(old, cfg)
	refused = append(refused, errs...)
	if len(refused) > 0 {
		return nil, reloadErr(refused...)
	}
	// Ready everything before changing anything.
	var commits []func()
	for _, hook := range h.reload.hooks {
		commit, err := hook(ctx, cfg)
		if err != nil {
			refused = append(refused, err)
		} else if commit != nil {
			commits = append(commits, commit)
		}
	}
	if cfg.TLS.CertFile != "" && !slices.Contains(res.Changed, "tls") {
		res.Changed = append(res.Changed, "tls") // re-read (a renewal keeps the names)
	}
	restart := map[string]string{}
	for _, e := range changed {
		why, err := e.dryRun(ctx, cfg.Extensions[e.name].Config)
		switch {
		case err != nil:
			refused = append(refused, fmt.Errorf("extensions.%s.config: %w", e.name, err))
		case why != "":
			restart[e.name] = why
		}
	}
	if len(refused) > 0 {
		return nil, reloadErr(refused...)
	}
	for _, commit := range commits {
		commit()
	}
	if limitsChanged {
		h.limits.Reconfigure(&cfg.Limits)
	}
	if policyChanged {
		h.pol.Store(cfg.Policy)
		// What each user sees may differ: every session lists again.
		h.reg.pokeAll()
	}
	var failed []error
	for _, e := range changed {
		res.Changed = append(res.Changed, "extensions."+e.name+".config")
		block := cfg.Extensions[e.name].Config
		e.setConfig(block)
		if why, ok := restart[e.name]; ok {
			res.Restarted = append(res.Restarted, e.name+": "+why)
			e.logger.Info("restarting the extension to take its new config", "reason", why)
			if _, err := e.m.Restart(ctx, "its config changed on a reload and "+why); err != nil {
				failed = append(failed, fmt.Errorf("extensions.%s: restarting with the new config: %w", e.name, err))
			}
			continue
		}
		if err := e.reconfigure(ctx, block); err != nil {
			failed = append(failed, fmt.Errorf("extensions.%s.config: %w", e.name, err))
		}
	}
	// What was applied is the file now, even where an extension failed
	// (it reports it; a later reload tries again only what differs).
	h.reload.loaded = cfg
	if err := errors.Join(failed...); err != nil {
		return res, fmt.Errorf("reload applied, but: %w", err)
	}
	return res, nil
}

// extensionChanges returns the running extensions whose config block
// differs in cfg from the one they run with, and refuses every other
// change of the extensions block.
func (h *Host) extensionChanges(old, cfg *Config) ([]*extension, []error) {
	var changed []*extension
	var refused []error
	names := map[string]bool{}
	for n := range old.Extensions {
		names[n] = true
	}
	for n := range cfg.Extensions {
		names[n] = true
	}
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range names {
			if !yield(k) {
				return
			}
		}
	}) {
		oe, inOld := old.Extensions[n]
		ne, inNew := cfg.Extensions[n]
		switch {
		case !inOld:
			refused = append(refused, fmt.Errorf("extensions.%s: adding an extension needs a restart of the host", n))
			continue
		case !inNew:
			refused = append(refused, fmt.Errorf("extensions.%s: removing an extension needs a restart of the host", n))
			continue
		}
		for _, d := range []struct {
			field string
			same  bool
		}{
			{"path", oe.Path == ne.Path}, {"sha256", oe.SHA256 == ne.SHA256}, {"args", slices.Equal(oe.Args, ne.Args)},
			{"env", reflect.DeepEqual(oe.Env, ne.Env)}, {"disabled", oe.Disabled == ne.Disabled},
			{"actAsUsers", oe.ActAsUsers == ne.ActAsUsers},
		} {
			if !d.same {
				refused = append(refused, fmt.Errorf("extensions.%s.%s: cannot change without a restart of the host", n, d.field))
			}
		}
		e := h.exts[n]
		if e == nil || ne.Disabled {
			continue // declared but not started: it takes its block when it starts
		}
		if !sameJSON(e.currentConfig(), ne.Config) {
			changed = append(changed, e)
		}
	}
	return changed, refused
}

// sameJSON reports whether a and b are the same JSON text but for
// insignificant space (both empty counts as the same).
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// currentConfig is the config block e runs with.
func (e *extension) currentConfig() []byte {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	return e.config
}

// setConfig makes block the config e runs with (and restarts with).
func (e *extension) setConfig(block []byte) {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	e.config = block
}

// dryRun asks e whether it takes block in place. A non-empty why says it
// cannot and must restart; an error refuses the block.
func (e *extension) dryRun(ctx context.Context, block []byte) (why string, err error) {
	restart := func(why string) (string, error) {
		if e.spec == nil {
			return "", fmt.Errorf("%s, and an in-process extension cannot restart: restart the host", why)
		}
		return why, nil
	}
	if !e.descriptor().Has(ext.CapabilityReconfigure) {
		return restart("it cannot take a new config in place")
	}
	err = use(ctx, e, ext.CapabilityReconfigure, func() string { return "checking the new config" }, func(r ext.Reconfigurer) error {
		return r.Reconfigure(ctx, &ext.ReconfigureRequest{Config: block, DryRun: true})
	})
	if errors.Is(err, ext.ErrUnimplemented) {
		return restart(err.Error())
	}
	return "", err
}

// reconfigure hands e its new block in place, then takes its new
// descriptor (its settings sections may follow the config).
func (e *extension) reconfigure(ctx context.Context, block []byte) error {
	var d *ext.Descriptor
	err := use(ctx, e, ext.CapabilityReconfigure, func() string { return "reconfiguring" }, func(r ext.Reconfigurer) error {
		if err := r.Reconfigure(ctx, &ext.ReconfigureRequest{Config: block}); err != nil {
			return err
		}
		g, err := e.m.Get(ctx)
		if err != nil {
			return err
		}
		d, err = g.Ext.Describe(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if d != nil && d.Name == e.name {
		if err := e.h.checkSections(e.name, d); err != nil {
			return err
		}
		e.m.SetDescriptor(d)
	}
	return nil
}
