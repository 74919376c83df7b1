package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
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
	servers, tools, expires := r.PostForm.Get("servers"), r.PostForm.Get("tools"), r.PostForm.Get("expires")
	sub := &submitted{ext: tokensTarget, form: url.Values{"name": {name}, "servers": {servers}, "tools": {tools}, "expires": {expires}}, errs: map[string]string{}}
	opts, field, msg := tokenOptions(servers, tools, expires, time.Now())
	if field != "" {
		sub.errs[field] = msg
		s.renderSettings(w, r, http.StatusBadRequest, sub, "")
		return
	}
	plain, tok, err := s.a.CreateScopedToken(r.Context(), ws.User, name, opts)
	switch {
	case errors.Is(err, auth.ErrInvalidArgument) && checkTokenName(name) != nil:
		sub.errs["name"] = "use 1 to 64 letters, digits, spaces or . _ @ + : / ( ) -"
		s.renderSettings(w, r, http.StatusBadRequest, sub, "")
		return
	case errors.Is(err, auth.ErrInvalidArgument), errors.Is(err, ext.ErrInvalidArgument):
		sub.errs["servers"] = err.Error()
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
		Name    string     `json:"name"`
		Scope   *ext.Scope `json:"scope"`
		Expires time.Time  `json:"expires"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, `the body must be {"name": "<a name for the token>"}, with optional "scope": {"servers": [...], "tools": [globs]} and "expires": "<RFC 3339 time>"`, nil)
		return
	}
	plain, tok, err := s.a.CreateScopedToken(r.Context(), p.User, in.Name, auth.TokenOptions{Scope: in.Scope, Expires: in.Expires})
	if errors.Is(err, auth.ErrInvalidArgument) || errors.Is(err, ext.ErrInvalidArgument) {
		field, msg := "scope", err.Error()
		if checkTokenName(in.Name) != nil {
			field, msg = "name", "use 1 to 64 letters, digits, spaces or . _ @ + : / ( ) -"
		} else if !in.Expires.IsZero() && !in.Expires.After(time.Now()) {
			field = "expires"
		}
		writeError(w, http.StatusBadRequest, err.Error(), []fieldError{{Field: field, Message: msg}})
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

// tokenOptions reads the settings page's scope and expiry fields: servers
// and tool globs comma-separated, an expiry among expiryChoices. It
// returns the field at fault and why.
func tokenOptions(servers, tools, expires string, now time.Time) (o auth.TokenOptions, field, msg string) {
	split := func(v string) []string {
		var out []string
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
		return out
	}
	if sv := split(servers); len(sv) > 0 {
		o.Scope = &ext.Scope{Servers: sv, Tools: split(tools)}
		if err := o.Scope.Clone().Validate(); err != nil {
			return o, "servers", err.Error()
		}
	} else if strings.TrimSpace(tools) != "" {
		return o, "tools", "name the servers too: the globs narrow those servers' tools"
	}
	if expires != "" {
		d, ok := expiryChoices[expires]
		if !ok {
			return o, "expires", "choose one of the listed expiries"
		}
		o.Expires = now.Add(d)
	}
	return o, "", ""
}

// expiryChoices are the settings page's expiries.
var expiryChoices = map[string]time.Duration{
	"30m": 30 * time.Minute, "1h": time.Hour, "8h": 8 * time.Hour, "24h": 24 * time.Hour, "168h": 7 * 24 * time.Hour, "720h": 30 * 24 * time.Hour,
}

// checkTokenName is auth's rule for a token's name (a name it refuses
// is the name field's error, anything else the scope's).
func checkTokenName(name string) error { return auth.CheckTokenName(name) }
