package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// ActionHost is implemented by a [Host] that routes actions to its
// extensions (*host.Host); without it the action routes answer 501.
type ActionHost interface {
	// RunAction asks extension extName for action on its status entry
	// (user, name) for caller (a user, or api.OperatorUser), after
	// checking that the caller may.
	RunAction(ctx context.Context, caller, extName, user, name, action string) (string, error)
}

// runAction routes one action for caller; the host checks who may.
func (s *server) runAction(ctx context.Context, caller, extName, user, name, action string) (string, error) {
	ah, ok := s.h.(ActionHost)
	if !ok {
		return "", fmt.Errorf("this host runs no actions: %w", ext.ErrUnimplemented)
	}
	return ah.RunAction(ctx, caller, extName, user, name, action)
}

// apiAction is POST /api/v1/extensions/{ext}/actions/{action} with
// {"name": ENTRY}: the user's own entry only.
func (s *server) apiAction(w http.ResponseWriter, r *http.Request) {
	s.serveAction(w, r, principalFrom(r.Context()).User)
}

// apiOperatorAction is POST /api/operator/v1/extensions/{ext}/actions/{action}
// with {"user": U, "name": ENTRY}: any user's entry.
func (s *server) apiOperatorAction(w http.ResponseWriter, r *http.Request) {
	s.serveAction(w, r, api.OperatorUser)
}

func (s *server) serveAction(w http.ResponseWriter, r *http.Request, caller string) {
	var in struct {
		User string `json:"user"`
		Name string `json:"name"`
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Name == "" {
		writeError(w, http.StatusBadRequest, `the body must be {"name": "<the status entry's name>"} (the operator's adds "user")`, nil)
		return
	}
	if caller != api.OperatorUser {
		if in.User != "" && in.User != caller {
			// A user names no one else; it reads as no such entry.
			writeError(w, http.StatusNotFound, "no such action", nil)
			return
		}
		in.User = caller
	} else if in.User == "" {
		writeError(w, http.StatusBadRequest, `the operator's body must name the entry's "user"`, nil)
		return
	}
	msg, err := s.runAction(r.Context(), caller, chi.URLParam(r, "ext"), in.User, in.Name, chi.URLParam(r, "action"))
	if err != nil {
		if errors.Is(err, ext.ErrUnimplemented) {
			writeError(w, http.StatusNotImplemented, err.Error(), nil)
			return
		}
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": msg})
}

// settingsAction is the settings page's button for an action of one of
// the signed-in user's status entries (the form's "name").
func (s *server) settingsAction(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	if ws.Operator {
		s.errorPage(w, r, http.StatusNotFound, "Not found", "The operator has no entries of their own here; use agenthost ext action.")
		return
	}
	name := r.PostForm.Get("name")
	msg, err := s.runAction(r.Context(), ws.User, chi.URLParam(r, "ext"), ws.User, name, chi.URLParam(r, "action"))
	if err != nil {
		code, text := s.hostErrStatus(r, err)
		s.errorPage(w, r, code, "Not done", text)
		return
	}
	s.renderSettings(w, r, http.StatusOK, nil, name+": "+msg)
}
