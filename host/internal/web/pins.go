package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// Pinner is implemented by a [Host] that pins tool definitions
// (*host.Host, README "Tool pinning"): the JSON APIs and the settings page
// then show the changed tools with their diffs and approve them.
type Pinner interface {
	Pins(ctx context.Context, user, server string, all bool) ([]pins.View, error)
	// OwnPins is Pins of one user as that user may see them: without
	// the tools the policy denies them (absent for them everywhere).
	OwnPins(ctx context.Context, user string, all bool) ([]pins.View, error)
	ApprovePins(ctx context.Context, a pins.Approval, cred string) ([]pins.View, error)
}

func (s *server) pinner() (Pinner, error) {
	p, ok := s.h.(Pinner)
	if !ok {
		return nil, fmt.Errorf("this host pins no tools: %w", ext.ErrUnimplemented)
	}
	return p, nil
}

// ownPins returns the user's own pins (the pending ones unless all):
// never another user's row.
func (s *server) ownPins(ctx context.Context, user string, all bool) ([]pins.View, error) {
	p, err := s.pinner()
	if err != nil {
		return nil, err
	}
	vs, err := p.OwnPins(ctx, user, all)
	out := make([]pins.View, 0, len(vs))
	for _, v := range vs {
		if v.User == user {
			out = append(out, v)
		}
	}
	return out, err
}

// pinApproval is the body of a POST .../pins/approve.
type pinApproval struct {
	Server string `json:"server"`
	Tool   string `json:"tool,omitempty"`
	User   string `json:"user,omitempty"` // the operator API only
}

func (s *server) readApproval(w http.ResponseWriter, r *http.Request, operator bool) (pinApproval, bool) {
	var in pinApproval
	body, ok := s.readBody(w, r)
	if !ok {
		return in, false
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Server == "" || (!operator && in.User != "") {
		msg := `the body must be {"server": "<server>"}, with an optional "tool": "<tool>"`
		if operator {
			msg = `the body must be {"server": "<server>"}, with an optional "tool": "<tool>" and "user": "<user>" (a user's own server needs it)`
		}
		writeError(w, http.StatusBadRequest, msg, nil)
		return in, false
	}
	return in, true
}

// apiPins serves GET /api/v1/pins: the bearer's own changed tools (all=true:
// every pinned tool), with the old and new definitions and their diff.
func (s *server) apiPins(w http.ResponseWriter, r *http.Request) {
	vs, err := s.ownPins(r.Context(), principalFrom(r.Context()).User, r.URL.Query().Get("all") == "true")
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vs)
}

// apiApprovePins serves POST /api/v1/pins/approve: the bearer approves
// their own server's changes ({"server", "tool"}); the operator's
// servers' changes are the operator's to approve.
func (s *server) apiApprovePins(w http.ResponseWriter, r *http.Request) {
	in, ok := s.readApproval(w, r, false)
	if !ok {
		return
	}
	p, err := s.pinner()
	if err == nil {
		var vs []pins.View
		vs, err = p.ApprovePins(r.Context(), pins.Approval{Server: in.Server, Tool: in.Tool, User: principalFrom(r.Context()).User, ByUser: true}, "api")
		if err == nil {
			writeJSON(w, http.StatusOK, vs)
			return
		}
	}
	s.apiHostError(w, r, err)
}

// apiOperatorPins serves GET /api/operator/v1/pins: every user's changed
// tools (filters: user, server; all=true: every pinned tool).
func (s *server) apiOperatorPins(w http.ResponseWriter, r *http.Request) {
	p, err := s.pinner()
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	q := r.URL.Query()
	vs, err := p.Pins(r.Context(), q.Get("user"), q.Get("server"), q.Get("all") == "true")
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	if vs == nil {
		vs = []pins.View{}
	}
	writeJSON(w, http.StatusOK, vs)
}

// apiOperatorApprovePins serves POST /api/operator/v1/pins/approve: the
// operator approves a server's changes ({"server", "tool", "user"}): an
// operator's server's for every user who saw them, a user's own with
// "user".
func (s *server) apiOperatorApprovePins(w http.ResponseWriter, r *http.Request) {
	in, ok := s.readApproval(w, r, true)
	if !ok {
		return
	}
	p, err := s.pinner()
	if err == nil {
		var vs []pins.View
		vs, err = p.ApprovePins(r.Context(), pins.Approval{Server: in.Server, Tool: in.Tool, User: in.User}, "operator-api")
		if err == nil {
			writeJSON(w, http.StatusOK, vs)
			return
		}
	}
	s.apiHostError(w, r, err)
}

// approvePinsForm serves POST /settings/_pins/approve (the settings page's
// Approve button): a user approves their own server's change; the
// operator's session approves an operator's server's change for every
// user who saw it.
func (s *server) approvePinsForm(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	p, err := s.pinner()
	if err != nil {
		s.notFound(w, r)
		return
	}
	a := pins.Approval{Server: r.PostForm.Get("server"), Tool: r.PostForm.Get("tool")}
	if !ws.Operator {
		a.User, a.ByUser = ws.User, true
	}
	_, err = p.ApprovePins(r.Context(), a, "web")
	switch {
	case errors.Is(err, ext.ErrNotFound) || errors.Is(err, ext.ErrInvalidArgument):
		s.errorPage(w, r, http.StatusNotFound, "Nothing to approve", "No change of this tool waits for your approval.")
		return
	case err != nil:
		s.logger.Error("approving a tool pin", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Not approved", "The change could not be approved; the host's log has the details.")
		return
	}
	s.logger.Info("tool pin approved in the web UI", "user", ws.User, "operator", ws.Operator, "server", a.Server, "tool", a.Tool)
	http.Redirect(w, r, s.path("/settings?pin=approved")+"#pins", http.StatusSeeOther)
}
