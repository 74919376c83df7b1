package host

import (
	"context"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// StatusEntry is one line of an extension's per-user status.
type StatusEntry = api.StatusEntry

// Overview is the operator's summary for status pages.
type Overview = api.Overview

// Status reports every extension's per-user status for user, or for every
// user when user is "". An extension that fails to answer is reported as
// one entry with its error, and does not hide the others.
func (h *Host) Status(ctx context.Context, user string) ([]StatusEntry, error) {
	if user != "" {
		if err := checkUser(user); err != nil {
			return nil, err
		}
	}
	exts := sortedExtensions(h.exts)
	per := make([][]StatusEntry, len(exts))
	var g errgroup.Group
	for i, e := range exts {
		if !e.descriptor().Has(ext.CapabilityStatus) {
			continue
		}
		g.Go(func() error {
			entries, err := h.statusOf(ctx, e, user)
			if err != nil {
				entries = []StatusEntry{{Extension: e.name, User: user, Name: e.name, State: "unavailable", Reason: err.Error()}}
			}
			per[i] = entries
			return nil
		})
	}
	_ = g.Wait() // an extension that failed has its one line in per
	var out []StatusEntry
	for _, entries := range per {
		out = append(out, entries...)
	}
	h.pinStatus(out)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.User != b.User {
			return a.User < b.User
		}
		if a.Extension != b.Extension {
			return a.Extension < b.Extension
		}
		return a.Name < b.Name
	})
	return out, nil
}

func (h *Host) statusOf(ctx context.Context, e *extension, user string) ([]StatusEntry, error) {
	var entries []ext.StatusEntry
	err := use(ctx, e, ext.CapabilityStatus, func() string { return "reporting status" },
		func(sr ext.StatusReporter) (err error) {
			entries, err = sr.Status(ctx, user)
			return err
		})
	if err != nil {
		return nil, err
	}
	out := make([]StatusEntry, 0, len(entries))
	for _, s := range entries {
		if user != "" && s.User != user {
			// Never show one user another's lines, whatever the extension
			// sends.
			continue
		}
		out = append(out, StatusEntry{Extension: e.name, User: s.User, Name: s.Name, State: s.State, Reason: s.Reason,
			NextRetry: s.NextRetry, Tools: s.Tools, Detail: s.Detail, Actions: s.Actions})
	}
	return out, nil
}

// Overview returns the operator's summary. It never fails; the error is
// there for surfaces that reach a host over a connection.
func (h *Host) Overview(context.Context) (Overview, error) {
	h.mu.Lock()
	users := len(h.active)
	h.mu.Unlock()
	var st *AuditStats
	if h.audit != nil {
		s := h.audit.Stats()
		st = &s
	}
	return Overview{
		Audit:   st,
		Version: Build().Version, Commit: Build().Commit, CommitDate: Build().Date, ExtProtocol: ext.ProtocolVersion, Started: h.start, Uptime: time.Since(h.start).Round(time.Second).String(),
		Extensions: h.extensionInfos(), ActiveUsers: users, ServiceProcesses: h.services.Running(),
		SecretsBackend: h.secretsKind,
	}, nil
}
