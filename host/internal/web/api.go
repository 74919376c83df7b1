package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/settings"
)

func principalFrom(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey).(auth.Principal)
	return p
}

// bearerToken returns the token of an "Authorization: Bearer" header, and
// whether the header was there at all.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// authenticate checks the request's bearer token, with the lockout. It
// writes the error response itself and returns false on failure.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, bool) {
	tok, present := bearerToken(r)
	if !present {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agenthost"`)
		writeError(w, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <token> (agenthost token create)", nil)
		return auth.Principal{}, false
	}
	p, err := s.a.Authenticate(r.Context(), s.addrKey(r), tok)
	switch {
	case err == nil:
		return p, true
	case errors.Is(err, auth.ErrLockedOut):
		retryAfter(w, err)
		var le *auth.LockoutError
		errors.As(err, &le)
		writeError(w, http.StatusTooManyRequests, le.Error(), nil)
	case errors.Is(err, auth.ErrInvalidToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="agenthost", error="invalid_token"`)
		msg := "invalid or revoked token"
		switch {
		case errors.Is(err, auth.ErrScoped):
			msg = "this token is scoped to some servers: it opens /mcp only, not the JSON API"
		case errors.Is(err, auth.ErrExpired):
			msg = "this token has expired"
		}
		writeError(w, http.StatusUnauthorized, msg, nil)
	default:
		s.logger.Error("checking a bearer token", "err", err)
		writeError(w, http.StatusInternalServerError, "internal error; the host's log has the details", nil)
	}
	return auth.Principal{}, false
}

// requireBearer admits users' bearer tokens; operator tokens have no user
// data to see here.
func (s *server) requireBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if p.Operator || p.User == "" {
			writeError(w, http.StatusForbidden, "an operator token has no user settings; use a user's token (the operator's is for /status.json)", nil)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey, p)))
	})
}

func (s *server) apiNotFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path, nil)
}

func (s *server) apiMethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path, nil)
}

// apiHostError writes a host error as JSON, with per-field errors when
// the host refused values.
func (s *server) apiHostError(w http.ResponseWriter, r *http.Request, err error) {
	var fe settings.FieldErrors
	if errors.As(err, &fe) {
		fields := make([]fieldError, 0, len(fe))
		for _, e := range fe {
			fields = append(fields, fieldError{Field: e.Field, Message: e.Msg})
		}
		writeError(w, http.StatusBadRequest, "invalid values: "+fe.Error(), fields)
		return
	}
	code, msg := s.hostErrStatus(r, err)
	writeError(w, code, msg, nil)
}

// readBody reads a request body within the limit, answering 413 itself.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		if isBodyTooLarge(err) {
			s.tooLarge(w, r)
		} else {
			writeError(w, http.StatusBadRequest, "reading the request body failed", nil)
		}
		return nil, false
	}
	return b, true
}

func (s *server) apiMe(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	writeJSON(w, http.StatusOK, map[string]string{"user": p.User, "tokenId": p.TokenID})
}

func (s *server) apiSections(w http.ResponseWriter, r *http.Request) {
	out := s.userSections(r.Context())
	if out == nil {
		out = []api.Section{}
	}
	writeJSON(w, http.StatusOK, out)
}

// settingsBody is the JSON of a user's values of one section.
type settingsBody struct {
	Values   json.RawMessage `json:"values"`
	Defaults json.RawMessage `json:"defaults"`
	Secrets  map[string]bool `json:"secrets,omitempty"`
}

func (s *server) apiSettings(w http.ResponseWriter, r *http.Request, code int) {
	p := principalFrom(r.Context())
	sec, ok := s.userSection(r.Context(), chi.URLParam(r, "ext"), chi.URLParam(r, "section"))
	if !ok {
		writeError(w, http.StatusNotFound, "no such settings section", nil)
		return
	}
	f, err := settings.ParseForm(sec.Form)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	v, err := s.h.GetSettings(r.Context(), p.User, sec.Extension, sec.ID)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	values := v.Values
	if len(values) == 0 {
		values = json.RawMessage("{}")
	}
	writeJSON(w, code, settingsBody{Values: values, Defaults: settings.Defaults(f), Secrets: v.Secrets})
}

func (s *server) apiGetSettings(w http.ResponseWriter, r *http.Request) {
	s.apiSettings(w, r, http.StatusOK)
}

func (s *server) apiPutSettings(w http.ResponseWriter, r *http.Request) {
	s.apiWriteSettings(w, r, s.h.SetSettings)
}

// apiPatchSettings takes a JSON Merge Patch (RFC 7396; Content-Type
// application/merge-patch+json or application/json) of the section's
// values.
func (s *server) apiPatchSettings(w http.ResponseWriter, r *http.Request) {
	s.apiWriteSettings(w, r, s.h.PatchSettings)
}

func (s *server) apiWriteSettings(w http.ResponseWriter, r *http.Request,
	write func(ctx context.Context, user, extension, section string, values json.RawMessage) error) {
	p := principalFrom(r.Context())
	sec, ok := s.userSection(r.Context(), chi.URLParam(r, "ext"), chi.URLParam(r, "section"))
	if !ok {
		writeError(w, http.StatusNotFound, "no such settings section", nil)
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if err := write(r.Context(), p.User, sec.Extension, sec.ID, body); err != nil {
		s.apiHostError(w, r, err)
		return
	}
	s.apiSettings(w, r, http.StatusOK)
}

func (s *server) apiSecretNames(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	names, err := s.h.SecretNames(r.Context(), p.User, chi.URLParam(r, "ext"))
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	if names == nil {
		names = []string{}
	}
	writeJSON(w, http.StatusOK, map[string][]string{"names": names})
}

func (s *server) apiPutSecret(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Value *string `json:"value"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Value == nil || *in.Value == "" {
		writeError(w, http.StatusBadRequest, `the body must be {"value": "<a non-empty string>"}`,
			[]fieldError{{Field: "value", Message: "required, a non-empty string"}})
		return
	}
	if err := s.h.SetSecret(r.Context(), p.User, chi.URLParam(r, "ext"), chi.URLParam(r, "name"), *in.Value); err != nil {
		s.apiHostError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) apiDeleteSecret(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	if err := s.h.DeleteSecret(r.Context(), p.User, chi.URLParam(r, "ext"), chi.URLParam(r, "name")); err != nil {
		s.apiHostError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// apiTools lists the user's tools in their one JSON shape (api.Tool).
func (s *server) apiTools(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	tools, err := s.h.Tools(r.Context(), p.User)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	if tools == nil {
		tools = []api.Tool{}
	}
	writeJSON(w, http.StatusOK, tools)
}

func (s *server) apiStatus(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	st, err := s.h.Status(r.Context(), p.User)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	out := make([]api.StatusEntry, 0, len(st))
	for _, e := range st {
		if e.User == p.User { // never another user's line
			out = append(out, e)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
