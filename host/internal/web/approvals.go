package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// Approvals is what the settings page needs of the host's tool policy:
// a user's calls waiting for approval and the user's answer to one.
type Approvals interface {
	Approvals(ctx context.Context, user string) ([]api.Approval, error)
	// DecideApproval approves (minutes 0: that call once, when retried;
	// more: the tool for that long) or denies a waiting call of user; one
	// that is not user's is an error matching ext.ErrNotFound.
	DecideApproval(ctx context.Context, user, id string, approve bool, minutes int) error
}

// approvalsView is the settings page's "Waiting for your approval".
type approvalsView struct {
	Items []api.Approval
	Error string
}

func (s *server) waitingApprovals(ctx context.Context, user string) approvalsView {
	if s.opts.Approvals == nil {
		return approvalsView{}
	}
	items, err := s.opts.Approvals.Approvals(ctx, user)
	if err != nil {
		s.logger.Error("listing approvals", "err", err)
		return approvalsView{Error: "The calls waiting for your approval could not be listed; the host's log has the details."}
	}
	return approvalsView{Items: items}
}

// decideApproval answers one of the session user's waiting calls: the
// form's decision is "once", "minutes" (with minutes) or "deny".
func (s *server) decideApproval(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	if s.opts.Approvals == nil || ws.Operator {
		s.notFound(w, r)
		return
	}
	approve, minutes := true, 0
	switch r.PostForm.Get("decision") {
	case "once":
	case "minutes":
		n, err := strconv.Atoi(r.PostForm.Get("minutes"))
		if err != nil || n < 1 {
			s.errorPage(w, r, http.StatusBadRequest, "Not approved", "Give the minutes as a whole number from 1.")
			return
		}
		minutes = n
	case "deny":
		approve = false
	default:
		s.errorPage(w, r, http.StatusBadRequest, "Not decided", "Choose approve once, approve for some minutes, or deny.")
		return
	}
	err := s.opts.Approvals.DecideApproval(r.Context(), ws.User, r.PostForm.Get("id"), approve, minutes)
	switch {
	case errors.Is(err, ext.ErrNotFound):
		s.errorPage(w, r, http.StatusNotFound, "Not found", "No such call waits for your approval (it may have expired: call the tool again).")
		return
	case errors.Is(err, ext.ErrInvalidArgument):
		s.errorPage(w, r, http.StatusBadRequest, "Not approved", err.Error())
		return
	case err != nil:
		s.logger.Error("deciding an approval", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Not decided", "The approval could not be recorded; the host's log has the details.")
		return
	}
	res := "approved"
	if !approve {
		res = "denied"
	}
	http.Redirect(w, r, s.path("/settings?approval="+res)+"#approvals", http.StatusSeeOther)
}

func (s *server) apiApprovals(w http.ResponseWriter, r *http.Request) {
	if s.opts.Approvals == nil {
		writeJSON(w, http.StatusOK, []api.Approval{})
		return
	}
	items, err := s.opts.Approvals.Approvals(r.Context(), principalFrom(r.Context()).User)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, items)
}

// apiDecideApproval takes {"decision":"approve"|"deny","minutes":n}.
func (s *server) apiDecideApproval(w http.ResponseWriter, r *http.Request) {
	if s.opts.Approvals == nil {
		writeError(w, http.StatusNotFound, "no such call waits for your approval", nil)
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Decision string `json:"decision"`
		Minutes  int    `json:"minutes"`
	}
	if err := json.Unmarshal(body, &in); err != nil || (in.Decision != "approve" && in.Decision != "deny") {
		writeError(w, http.StatusBadRequest, `want {"decision":"approve"|"deny","minutes":n} (minutes 0 or absent: this call once)`, nil)
		return
	}
	err := s.opts.Approvals.DecideApproval(r.Context(), principalFrom(r.Context()).User, chi.URLParam(r, "id"), in.Decision == "approve", in.Minutes)
	switch {
	case errors.Is(err, ext.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such call waits for your approval", nil)
	case err != nil:
		s.apiHostError(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
