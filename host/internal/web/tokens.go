package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/host/internal/auth"
)

// tokensTarget marks a refused token form in [submitted].
const tokensTarget = "_tokens"

// ownsToken reports whether user holds the token id.
func (s *server) ownsToken(r *http.Request, user, id string) (bool, error) {
	toks, err := s.a.ListTokens(r.Context(), user)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(toks, func(t auth.Token) bool { return t.ID == id }), nil
}

// createToken issues a token for the session's user and shows it once.
func (s *server) createToken(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	if ws.Operator {
		s.forbidden(w, r, "The operator makes tokens with the agenthost CLI.")
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	sub := &submitted{ext: tokensTarget, form: url.Values{"name": {name}}, errs: map[string]string{}}
	plain, tok, err := s.a.CreateToken(r.Context(), ws.User, name)
	switch {
	case errors.Is(err, auth.ErrInvalidArgument):
		sub.errs["name"] = "use 1 to 64 letters, digits, spaces or . _ @ + : / ( ) -"
		s.renderSettings(w, r, http.StatusBadRequest, sub, "")
		return
	case err != nil:
		s.logger.Error("creating a token", "err", err)
		sub.general = "The token could not be created; the host's log has the details."
		s.renderSettings(w, r, http.StatusInternalServerError, sub, "")
		return
	}
	s.logger.Info("token created in the web UI", "user", ws.User, "token", tok.ID)
	sub.form, sub.newToken, sub.newTokenName = nil, plain, tok.Name
	s.renderSettings(w, r, http.StatusOK, sub, "")
}

// revokeToken revokes one of the session user's tokens.
func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	id := r.PostForm.Get("id")
	own, err := s.ownsToken(r, ws.User, id)
	if err != nil {
		s.logger.Error("listing tokens", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Not revoked", "The tokens could not be read; the host's log has the details.")
		return
	}
	if !own || ws.Operator {
		s.errorPage(w, r, http.StatusNotFound, "Not found", "You have no such token.")
		return
	}
	if err := s.a.RevokeToken(r.Context(), id); err != nil && !errors.Is(err, auth.ErrNotFound) {
		s.logger.Error("revoking a token", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Not revoked", "The token could not be revoked; the host's log has the details.")
		return
	}
	if id == ws.TokenID {
		// This session came from that token and ended with it.
		s.setSessionCookie(w, r, "", -1)
		http.Redirect(w, r, s.path("/settings/login?signed-out=1"), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, s.path("/settings?token=revoked")+"#tokens", http.StatusSeeOther)
}

// tokenBody is a token as the API lists it; the token itself only once,
// when it is created.
type tokenBody struct {
	Secret string `json:"token,omitempty"`
	auth.Token
}

func (s *server) apiTokens(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	toks, err := s.a.ListTokens(r.Context(), p.User)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	out := make([]tokenBody, 0, len(toks))
	for _, t := range toks {
		out = append(out, tokenBody{Token: t})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) apiCreateToken(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Name string `json:"name"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, `the body must be {"name": "<a name for the token>"}`, nil)
		return
	}
	plain, tok, err := s.a.CreateToken(r.Context(), p.User, in.Name)
	if errors.Is(err, auth.ErrInvalidArgument) {
		writeError(w, http.StatusBadRequest, err.Error(), []fieldError{{Field: "name", Message: "use 1 to 64 letters, digits, spaces or . _ @ + : / ( ) -"}})
		return
	}
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, tokenBody{Secret: plain, Token: tok})
}

func (s *server) apiRevokeToken(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	id := chi.URLParam(r, "id")
	own, err := s.ownsToken(r, p.User, id)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	if !own {
		writeError(w, http.StatusNotFound, "you have no such token", nil)
		return
	}
	if err := s.a.RevokeToken(r.Context(), id); err != nil && !errors.Is(err, auth.ErrNotFound) {
		s.apiHostError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
