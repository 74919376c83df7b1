package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
)

// ConnectedApps is what the settings page needs of the host's OAuth
// authorization server: a user's grants ("connected apps") and their
// revocation, which also ends the grant's open MCP sessions.
type ConnectedApps interface {
	Grants(ctx context.Context, user string) ([]api.Grant, error)
	// RevokeGrant revokes a grant of user; one that is not user's is an
	// error matching ext.ErrNotFound.
	RevokeGrant(ctx context.Context, user, id string) error
}

// Sessions lends the settings UI's sign-in to another page of the same
// server (the OAuth authorization page): the browser's signed-in user,
// the session's CSRF check, the sign-in form's anti-forgery token, and
// the sign-in page that comes back. It is safe for concurrent use.
type Sessions struct{ s *server }

// NewSessions returns the sign-in of the web UI that [New] serves with the
// same store and options.
func NewSessions(a *auth.Store, opts *Options) *Sessions {
	return &Sessions{s: newServer(nil, a, opts)}
}

// User returns the user signed in on r's browser and the session's CSRF
// token; ok is false without a live session and for the operator's.
func (x *Sessions) User(w http.ResponseWriter, r *http.Request) (user, csrf string, ok bool) {
	ws := x.s.currentSession(w, r)
	if ws == nil || ws.Operator || ws.User == "" {
		return "", "", false
	}
	return ws.User, ws.CSRF, true
}

// ValidCSRF reports whether r's parsed form carries the session's CSRF
// token csrf, compared in constant time.
func (x *Sessions) ValidCSRF(r *http.Request, csrf string) bool {
	return equalSecret(r.Form.Get(csrfField), csrf) || equalSecret(r.PostForm.Get(csrfField), csrf)
}

// FormToken returns the sign-in form's anti-forgery value (double
// submit), setting its cookie when the browser has none.
func (x *Sessions) FormToken(w http.ResponseWriter, r *http.Request) string {
	return x.s.loginToken(w, r)
}

// ValidFormToken reports whether r's parsed form carries the value of its
// anti-forgery cookie.
func (x *Sessions) ValidFormToken(r *http.Request) bool {
	c, err := r.Cookie(loginCookie)
	return err == nil && equalSecret(r.PostForm.Get(csrfField), c.Value)
}

// LoginURL is the sign-in page that sends the browser on to next (a path
// of this server) once signed in.
func (x *Sessions) LoginURL(next string) string {
	return x.s.path("/settings/login") + "?next=" + url.QueryEscape(next)
}

// ProviderLogin is the OpenID Connect provider's name and the path that
// signs in there and comes back to next (a path of this server); "" and
// "" without a provider.
func (x *Sessions) ProviderLogin(next string) (name, loginURL string) {
	if x.s.opts.OIDC == nil {
		return "", ""
	}
	u := x.s.path(OIDCStartPath)
	if next = x.s.safeNext(next); next != "" {
		u += "?next=" + url.QueryEscape(next)
	}
	return x.s.opts.OIDC.Name(), u
}

// safeNext returns next when it is a path of this server to go on to
// after sign-in, else "": never another site (an open redirect).
func (s *server) safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, s.base+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return ""
	}
	return next
}

// appsView is the settings page's "Connected apps" section.
type appsView struct {
	Enabled bool
	Grants  []api.Grant
	Error   string
}

// connectedApps lists the user's grants for the settings page.
func (s *server) connectedApps(ctx context.Context, user string) appsView {
	if s.opts.Apps == nil {
		return appsView{}
	}
	v := appsView{Enabled: true}
	gs, err := s.opts.Apps.Grants(ctx, user)
	if err != nil {
		s.logger.Error("listing connected apps", "err", err)
		v.Error = "Your connected apps could not be listed; the host's log has the details."
		return v
	}
	v.Grants = gs
	return v
}

// revokeApp revokes one of the session user's grants.
func (s *server) revokeApp(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	if s.opts.Apps == nil || ws.Operator {
		s.notFound(w, r)
		return
	}
	err := s.opts.Apps.RevokeGrant(r.Context(), ws.User, r.PostForm.Get("id"))
	switch {
	case errors.Is(err, ext.ErrNotFound):
		s.errorPage(w, r, http.StatusNotFound, "Not found", "You have no such connected app.")
		return
	case err != nil:
		s.logger.Error("revoking a grant", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Not revoked", "The app could not be disconnected; the host's log has the details.")
		return
	}
	s.logger.Info("connected app revoked in the web UI", "user", ws.User, "grant", r.PostForm.Get("id"))
	http.Redirect(w, r, s.path("/settings?app=revoked")+"#apps", http.StatusSeeOther)
}

func (s *server) apiGrants(w http.ResponseWriter, r *http.Request) {
	if s.opts.Apps == nil {
		writeJSON(w, http.StatusOK, []api.Grant{})
		return
	}
	p := principalFrom(r.Context())
	gs, err := s.opts.Apps.Grants(r.Context(), p.User)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, gs)
}

func (s *server) apiRevokeGrant(w http.ResponseWriter, r *http.Request) {
	if s.opts.Apps == nil {
		writeError(w, http.StatusNotFound, "you have no such connected app", nil)
		return
	}
	p := principalFrom(r.Context())
	err := s.opts.Apps.RevokeGrant(r.Context(), p.User, chi.URLParam(r, "id"))
	switch {
	case errors.Is(err, ext.ErrNotFound):
		writeError(w, http.StatusNotFound, "you have no such connected app", nil)
	case err != nil:
		s.apiHostError(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
