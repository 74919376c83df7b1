package web

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// Auditor is implemented by a [Host] that keeps the audit log
// (*host.Host): the JSON APIs and the settings page then show it.
type Auditor interface {
	Audit(ctx context.Context, f audit.Filter) ([]audit.Record, error)
}

// ownAudit returns the user's own audit records f selects: f.User is
// always the signed-in user, never the request's.
func (s *server) ownAudit(ctx context.Context, user string, f audit.Filter) ([]audit.Record, error) {
	a, ok := s.h.(Auditor)
	if !ok {
		return nil, fmt.Errorf("this host keeps no audit log: %w", ext.ErrUnimplemented)
	}
	f.User = user
	recs, err := a.Audit(ctx, f)
	out := make([]audit.Record, 0, len(recs))
	for _, r := range recs {
		if r.User == user { // never another user's record
			out = append(out, r)
		}
	}
	return out, err
}

// apiAudit serves GET /api/v1/audit: the bearer's own records (filters:
// server, tool, outcome, kind, since, after, limit; a user filter is
// ignored).
func (s *server) apiAudit(w http.ResponseWriter, r *http.Request) {
	f, err := audit.ParseFilter(r.URL.Query())
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	recs, err := s.ownAudit(r.Context(), principalFrom(r.Context()).User, f)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, recs)
}

// apiOperatorAudit serves GET /api/operator/v1/audit: every user's
// records (filters: user, server, tool, outcome, kind, since, after,
// limit).
func (s *server) apiOperatorAudit(w http.ResponseWriter, r *http.Request) {
	a, ok := s.h.(Auditor)
	if !ok {
		s.apiHostError(w, r, fmt.Errorf("this host keeps no audit log: %w", ext.ErrUnimplemented))
		return
	}
	f, err := audit.ParseFilter(r.URL.Query())
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	recs, err := a.Audit(r.Context(), f)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	if recs == nil {
		recs = []audit.Record{}
	}
	writeJSON(w, http.StatusOK, recs)
}
