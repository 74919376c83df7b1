package web

import (
	"context"
	"net/http"

	"github.com/agenthost/agenthost/host/internal/api"
)

// statusBody is the operator's status: the host's overview, the count
// of open MCP sessions and the fleet view (every user's servers that are
// not well, with their reasons, also of users not active now). No
// secrets; the operator's eyes only.
type statusBody struct {
	api.Overview
	MCPSessions int              `json:"mcpSessions"`
	Fleet       []api.FleetEntry `json:"fleet"`
}

// fleeter is a [Host] that keeps the fleet view (*host.Host).
type fleeter interface {
	Fleet(ctx context.Context) ([]api.FleetEntry, error)
}

// operator admits the operator, by an operator token in the Authorization
// header or by an operator's web session. It answers the others itself
// and returns false.
func (s *server) operator(w http.ResponseWriter, r *http.Request, asJSON bool) bool {
	if _, present := bearerToken(r); present {
		p, ok := s.authenticate(w, r)
		if !ok {
			return false
		}
		if !p.Operator {
			writeError(w, http.StatusForbidden, "the status page needs an operator token (agenthost token create --operator)", nil)
			return false
		}
		return true
	}
	ws := s.currentSession(w, r)
	switch {
	case ws != nil && ws.Operator:
		return true
	case asJSON && ws == nil:
		w.Header().Set("WWW-Authenticate", `Bearer realm="agenthost"`)
		writeError(w, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <operator token>", nil)
	case asJSON:
		writeError(w, http.StatusForbidden, "the status page is for the operator", nil)
	case ws == nil:
		s.render(w, r, http.StatusUnauthorized, "error.html", map[string]any{
			"Base": s.base, "Title": "Operator sign-in needed",
			"Message": "The status page is for the operator. Sign in with an operator token (agenthost token create --operator --name NAME).",
			"Login":   true,
		})
	default:
		s.errorPage(w, r, http.StatusForbidden, "Forbidden", "The status page is for the operator; you are signed in as "+ws.User+".")
	}
	return false
}

func (s *server) status(ctx context.Context) (statusBody, error) {
	ov, err := s.h.Overview(ctx)
	if err != nil {
		return statusBody{}, err
	}
	b := statusBody{Overview: ov, Fleet: []api.FleetEntry{}}
	if f, ok := s.h.(fleeter); ok {
		if b.Fleet, err = f.Fleet(ctx); err != nil {
			return statusBody{}, err
		}
	}
	if s.opts.MCPSessions != nil {
		b.MCPSessions = s.opts.MCPSessions()
	}
	return b, nil
}

func (s *server) statusPage(w http.ResponseWriter, r *http.Request) {
	if !s.operator(w, r, false) {
		return
	}
	var csrf string
	if ws := s.currentSession(w, r); ws != nil {
		csrf = ws.CSRF
	}
	st, err := s.status(r.Context())
	if err != nil {
		code, msg := s.hostErrStatus(r, err)
		s.errorPage(w, r, code, "Status unavailable", msg)
		return
	}
	s.render(w, r, http.StatusOK, "status.html", map[string]any{"Base": s.base, "S": st, "CSRF": csrf})
}

func (s *server) statusJSON(w http.ResponseWriter, r *http.Request) {
	if !s.operator(w, r, true) {
		return
	}
	st, err := s.status(r.Context())
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
