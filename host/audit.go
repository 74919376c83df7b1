package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// AuditConfig configures the audit log (README "Audit log"): one record
// per tool call, prompt get and resource read in audit.db in the data
// folder. Zero fields take the defaults.
type AuditConfig struct {
	// Off turns the audit log off.
	Off bool `json:"off,omitempty"`
	// RetentionDays deletes records older than that (default 90).
	RetentionDays float64 `json:"retentionDays,omitempty"`
	// MaxRows keeps at most that many records, the newest (default
	// 1,000,000).
	MaxRows int64 `json:"maxRows,omitempty"`
	// SweepMinutes is how often the retention is applied (default 60).
	SweepMinutes float64 `json:"sweepMinutes,omitempty"`
	// Bodies keeps each call's arguments and result, cut to BodyBytes
	// (default 4096) each. Off by default: they may hold personal data.
	Bodies    bool `json:"bodies,omitempty"`
	BodyBytes int  `json:"bodyBytes,omitempty"`
	// Queue bounds the records waiting to be written (default 8192);
	// beyond it records are dropped and counted, never waited for.
	Queue int `json:"queue,omitempty"`
}

func (a AuditConfig) validate() []error {
	var errs []error
	if a.RetentionDays < 0 || a.SweepMinutes < 0 || a.MaxRows < 0 || a.BodyBytes < 0 || a.Queue < 0 {
		errs = append(errs, errors.New("audit: retentionDays, maxRows, sweepMinutes, bodyBytes and queue must not be negative"))
	}
	return errs
}

// Kinds of audit records outside the call path (see [Host.AuditEvent]).
const (
	AuditKindToken    = audit.KindToken
	AuditKindSignIn   = audit.KindSignIn
	AuditKindSettings = audit.KindSettings
)

// AuditRecord is one entry of the audit log.
type AuditRecord = audit.Record

// AuditFilter selects audit records.
type AuditFilter = audit.Filter

// AuditStats are the audit writer's counters: written, dropped (the
// queue was full), failed (a write failed), queued, swept.
type AuditStats = audit.Stats

// openAudit opens audit.db and starts its writer, unless turned off.
func openAudit(cfg *Config, dataDir string, h *Host) error {
	ac := cfg.Audit
	if ac.Off {
		return nil
	}
	st, err := audit.OpenSQLite(filepath.Join(dataDir, audit.FileName))
	if err != nil {
		return err
	}
	h.audit = audit.NewWriter(st, &audit.WriterOptions{
		Queue: ac.Queue, Logger: h.logger,
		Retention: audit.Retention{Days: ac.RetentionDays, Rows: ac.MaxRows, Every: time.Duration(ac.SweepMinutes * float64(time.Minute))},
	})
	return nil
}

// closeAudit writes what is queued and closes audit.db.
func (h *Host) closeAudit() error {
	if h.audit == nil {
		return nil
	}
	h.audit.Close()
	if err := h.audit.Store().Close(); err != nil {
		return fmt.Errorf("closing the audit database: %w", err)
	}
	return nil
}

// Audit returns the audit records f selects, oldest first; f.User set
// limits them to that user's (what a user may see of the log).
func (h *Host) Audit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	if h.audit == nil {
		return nil, fmt.Errorf("the audit log is off (audit.off in the config): %w", ext.ErrUnavailable)
	}
	h.audit.Flush(ctx)
	return h.audit.Store().Query(ctx, f)
}

// AuditStats returns the audit writer's counters (zero when off).
func (h *Host) AuditStats() AuditStats {
	if h.audit == nil {
		return AuditStats{}
	}
	return h.audit.Stats()
}

// SweepAudit applies the audit retention now.
func (h *Host) SweepAudit(ctx context.Context) {
	if h.audit != nil {
		h.audit.Sweep(ctx)
	}
}

// AuditEvent adds a record of an act outside the call path (a token
// issued or revoked, a sign-in, a settings or secret change: never a
// value). A zero Time is now.
func (h *Host) AuditEvent(rec AuditRecord) {
	if h.audit != nil {
		h.audit.Add(rec)
	}
}

// auditCall records one call through the host's call path: kind is
// audit.KindTool, KindPrompt or KindResource; def the tool that ran (nil
// for others or when not found); size the result's bytes.
func (h *Host) auditCall(kind, user, name, cred, sess string, def *Tool, start time.Time, args []byte, isError bool, size int, result func() []byte, err error) {
	if h.audit == nil {
		return
	}
	rec := audit.Record{
		Time: start, Kind: kind, User: user, Credential: cred, Session: sess, Tool: name,
		Duration: time.Since(start), ReqBytes: int64(len(args)), ResBytes: int64(size), Outcome: audit.OutcomeOK,
	}
	if rec.Credential == "" {
		rec.Credential = "api"
	}
	if kind != audit.KindResource {
		rec.Server, _, _ = strings.Cut(name, "/")
	}
	if def != nil && def.Name != "" {
		rec.ToolHash = h.auditHashes.Hash(def.Name, def.Title, def.Description, def.InputSchema, def.OutputSchema, def.Annotations)
	}
	switch {
	case err != nil && (errors.Is(err, ext.ErrNotFound) || errors.Is(err, ext.ErrPermission) || errors.Is(err, ext.ErrInvalidArgument) || errors.Is(err, ext.ErrBusy)):
		rec.Outcome, rec.Reason = audit.OutcomeRefused, err.Error()
	case err != nil:
		rec.Outcome, rec.Reason = audit.OutcomeError, err.Error()
	case isError:
		rec.Outcome = audit.OutcomeToolError
	}
	if h.cfg.Audit.Bodies {
		n := h.cfg.Audit.BodyBytes
		if n <= 0 {
			n = 4096
		}
		rec.Arguments = audit.Cap(string(args), n)
		if err == nil && result != nil {
			rec.Result = audit.Cap(string(result()), n)
		}
	}
	h.audit.Add(rec)
}

// recordAction records an action asked of an extension (Tool is
// "ext/name:action", Credential who asked).
func (h *Host) recordAction(caller, extName, user, name, action string) {
	if h.audit == nil {
		return
	}
	h.audit.Add(audit.Record{Time: time.Now(), Kind: audit.KindAction, User: user, Credential: "api:" + caller,
		Server: extName, Tool: extName + "/" + name + ":" + action, Outcome: audit.OutcomeOK})
}

// auditChange records a settings or secret change of user (what, never a
// value) with its outcome; deferred with the caller's named error.
func (h *Host) auditChange(user, what string, start time.Time, errp *error) {
	if h.audit == nil {
		return
	}
	rec := audit.Record{Time: start, Kind: audit.KindSettings, User: user, Credential: "api", Tool: what,
		Duration: time.Since(start), Outcome: audit.OutcomeOK}
	switch err := *errp; {
	case err == nil:
	case errors.Is(err, ext.ErrInvalidArgument):
		// A refusal of values may quote them: the reason names none.
		rec.Outcome, rec.Reason = audit.OutcomeRefused, "invalid values"
	case errors.Is(err, ext.ErrPermission) || errors.Is(err, ext.ErrNotFound):
		rec.Outcome, rec.Reason = audit.OutcomeRefused, err.Error()
	default:
		rec.Outcome, rec.Reason = audit.OutcomeError, err.Error()
	}
	h.audit.Add(rec)
}
