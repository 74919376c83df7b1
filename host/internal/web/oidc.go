package web

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/oidclogin"
)

// OIDC paths, under the base path. The callback is the redirect URL the
// operator registers at the provider.
const (
	OIDCStartPath    = "/settings/oidc/start"
	OIDCCallbackPath = "/settings/oidc/callback"
	oidcCookieMaxAge = 600 // seconds a sign-in at the provider may take
)

// oidcPending is what the browser that began a sign-in at the provider
// keeps in its cookie until the callback: the state, nonce and PKCE
// verifier, and where to go afterwards (a path here).
type oidcPending struct {
	oidclogin.State
	Next string `json:"next,omitempty"`
}

// oidcCookie is the pending sign-in's cookie: HttpOnly, SameSite=Lax (the
// provider's redirect back is a cross-site top-level GET, which Lax lets
// it come with), ten minutes, __Host- over TLS.
func (s *server) oidcCookie() string {
	if s.opts.Secure {
		return "__Host-agenthost_oidc"
	}
	return "agenthost_oidc"
}

func (s *server) setOIDCCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: s.oidcCookie(), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.opts.Secure || r.TLS != nil, SameSite: http.SameSiteLaxMode,
	})
}

// oidcStart sends the browser to the provider: a fresh state, nonce and
// verifier in its cookie, next (a path here only) kept beside them.
func (s *server) oidcStart(w http.ResponseWriter, r *http.Request) {
	if s.opts.OIDC == nil {
		s.notFound(w, r)
		return
	}
	authURL, st, err := s.opts.OIDC.Begin(r.Context())
	if err != nil {
		s.logger.Error("oidc: starting a sign-in", "err", err)
		s.errorPage(w, r, http.StatusBadGateway, "Sign-in unavailable",
			"The identity provider could not be reached; try again shortly, or sign in with a token. The host's log has the details.")
		return
	}
	b, _ := json.Marshal(oidcPending{State: st, Next: s.safeNext(r.URL.Query().Get("next"))})
	s.setOIDCCookie(w, r, base64.RawURLEncoding.EncodeToString(b), oidcCookieMaxAge)
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// oidcCallback finishes a sign-in at the provider: the browser's pending
// sign-in (its cookie, used once) against the provider's answer. Signed
// in, the browser goes on to its page by a link of this site (the session
// cookie is SameSite=Strict: a redirect in a chain the provider started
// would arrive without it).
func (s *server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if s.opts.OIDC == nil {
		s.notFound(w, r)
		return
	}
	var p oidcPending
	if c, err := r.Cookie(s.oidcCookie()); err == nil {
		if b, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil {
			_ = json.Unmarshal(b, &p)
		}
	}
	s.setOIDCCookie(w, r, "", -1)
	user, err := s.opts.OIDC.Finish(r.Context(), p.State, r.URL.Query())
	var refusal *oidclogin.Refusal
	var perr *oidclogin.ProviderError
	switch {
	case errors.As(err, &refusal):
		s.refusals.Refused(s.logger, "oidc: sign-in refused", "user", refusal.User, "reason", refusal.Reason, "addr", s.addrKey(r))
		msg := s.opts.OIDC.Name() + " signed you in, but this host does not let you in: " + refusal.Reason +
			". Ask the host's operator if you think you should have access."
		s.render(w, r, http.StatusForbidden, "error.html", map[string]any{"Base": s.base, "Title": "Not allowed in", "Message": msg, "Login": true})
		return
	case errors.As(err, &perr):
		s.errorPage(w, r, http.StatusUnauthorized, "Sign-in cancelled", perr.Error()+". Try again, or sign in with a token.")
		return
	case errors.Is(err, oidclogin.ErrBadState):
		s.refusals.Refused(s.logger, "oidc: callback without this browser's sign-in", "addr", s.addrKey(r))
		s.render(w, r, http.StatusBadRequest, "error.html", map[string]any{"Base": s.base, "Title": "Sign-in expired",
			"Message": "This sign-in did not start in this browser, or took longer than 10 minutes. Start again.", "Login": true})
		return
	case err != nil:
		s.logger.Error("oidc: finishing a sign-in", "err", err)
		s.errorPage(w, r, http.StatusBadGateway, "Sign-in failed",
			"The sign-in with "+s.opts.OIDC.Name()+" could not be completed; the host's log has the details.")
		return
	}
	if err := s.startSession(w, r, auth.Principal{User: user}); err != nil {
		return
	}
	s.logger.Info("signed in to the web UI with the identity provider", "user", user)
	next := p.Next
	if next == "" {
		next = s.path("/settings")
	}
	s.render(w, r, http.StatusOK, "signedin.html", map[string]any{"Base": s.base, "User": user, "Next": next})
}

// startSession begins a fresh web session for p (the old one, if any,
// ends) and sets its cookie; on error it has answered.
func (s *server) startSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if old, err := r.Cookie(s.cookie); err == nil && old.Value != "" {
		_ = s.a.DeleteSession(r.Context(), old.Value)
	}
	id, _, err := s.a.CreateSession(r.Context(), p)
	if err != nil {
		s.logger.Error("creating a web session", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Sign-in failed", "The session could not be created; the host's log has the details.")
		return err
	}
	s.setSessionCookie(w, r, id, 0)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: s.opts.Secure || r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return nil
}
