package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/oidclogin"
)

type ctxKey int

const (
	sessionKey ctxKey = iota
	principalKey
)

// webSession is the signed-in browser of a request.
type webSession struct {
	ID string
	*auth.Session
}

func sessionFrom(ctx context.Context) *webSession {
	ws, _ := ctx.Value(sessionKey).(*webSession)
	return ws
}

// currentSession reads the session cookie; nil when there is no live
// session. A dead session's cookie is cleared.
func (s *server) currentSession(w http.ResponseWriter, r *http.Request) *webSession {
	c, err := r.Cookie(s.cookie)
	if err != nil || c.Value == "" {
		return nil
	}
	ss, err := s.a.Session(r.Context(), c.Value)
	if err != nil {
		if !errors.Is(err, auth.ErrNoSession) {
			s.logger.Error("reading a web session", "err", err)
		}
		s.setSessionCookie(w, r, "", -1)
		return nil
	}
	if s.opts.Recheck != nil && !ss.Operator && ss.User != "" {
		var refusal *oidclogin.Refusal
		switch err := s.opts.Recheck(r.Context(), ss.User); {
		case errors.As(err, &refusal):
			s.logger.Warn("oidc: a session's user is no longer admitted", "user", ss.User, "reason", refusal.Reason)
			_ = s.a.DeleteSession(r.Context(), c.Value)
			s.setSessionCookie(w, r, "", -1)
			return nil
		case err != nil:
			s.logger.Error("oidc: re-checking a session's user at the provider", "user", ss.User, "err", err)
		}
	}
	return &webSession{ID: c.Value, Session: ss}
}

// crossSiteNavigation reports whether r is a top-level navigation that
// another site started (Fetch Metadata).
func crossSiteNavigation(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") == "cross-site" && r.Header.Get("Sec-Fetch-Mode") == "navigate" &&
		r.Header.Get("Sec-Fetch-Dest") == "document"
}

// requireSession lets through requests of a signed-in browser and sends
// the others to the sign-in page (a navigation from another site first to
// the same page again, from this site). State-changing requests must
// carry the session's CSRF token.
func (s *server) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws := s.currentSession(w, r)
		if ws == nil {
			if r.Method == http.MethodGet && crossSiteNavigation(r) {
				// The session cookie is SameSite=Strict, so a link from
				// another site (the sign-in link in an agent's web app)
				// arrives without it: go on to the same page by a
				// navigation of this site, which carries it.
				s.render(w, r, http.StatusOK, "continue.html", s.base)
				return
			}
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				s.redirect(w, r, "/settings/login")
				return
			}
			s.errorPage(w, r, http.StatusUnauthorized, "Signed out",
				"Your session has ended (signed out, expired, or its token was revoked). Sign in again; your change was not saved.")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := r.ParseForm(); err != nil {
				s.formError(w, r, err)
				return
			}
			if !equalSecret(r.PostForm.Get(csrfField), ws.CSRF) {
				s.refusals.Refused(s.logger, "CSRF token mismatch", "addr", s.addrKey(r), "path", r.URL.Path)
				s.forbidden(w, r, "This form has expired or did not come from this site. Reload the page and try again.")
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey, ws)))
	})
}

// formError answers a form that could not be parsed.
func (s *server) formError(w http.ResponseWriter, r *http.Request, err error) {
	if isBodyTooLarge(err) {
		s.tooLarge(w, r)
		return
	}
	s.errorPage(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
}

func (s *server) setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: s.cookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.opts.Secure || r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

// loginToken returns the sign-in form's anti-forgery value, setting its
// cookie when the browser has none.
func (s *server) loginToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(loginCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: v, Path: "/", MaxAge: 3600,
		HttpOnly: true, Secure: s.opts.Secure || r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	return v
}

// loginView is what login.html shows.
type loginView struct {
	Base   string
	CSRF   string
	Code   string // a login link's code, for the confirmation form
	AsUser string // whom the link signs in
	// Check asks to continue with a link that came from another site: it
	// has not been looked at yet.
	Check  bool
	Error  string
	Notice string
	Title  string
	Next   string // where to go once signed in (a path here)
	// Provider names the OpenID Connect provider whose button comes
	// first; "" without one.
	Provider string
}

func (s *server) loginPage(w http.ResponseWriter, r *http.Request) {
	v := &loginView{Base: s.base, CSRF: s.loginToken(w, r), Title: "Sign in", Next: s.safeNext(r.URL.Query().Get("next")), Provider: s.providerName()}
	code := r.URL.Query().Get("code")
	if code == "" {
		if ws := s.currentSession(w, r); ws != nil {
			s.redirectAfter(w, r, ws.Operator, v.Next)
			return
		}
		if r.URL.Query().Get("signed-out") != "" {
			v.Notice = "You are signed out."
		}
		s.render(w, r, http.StatusOK, "login.html", v)
		return
	}
	// A login link asks before it signs in: following a link planted by
	// someone else must not sign this browser into their account. A link
	// followed from another site's page is not even looked at: any page
	// can make browsers follow links, and its bogus codes must neither
	// count as failures (locking the address out of guessing) nor, for a
	// real code, do anything; the page asks to continue with a POST that
	// only this site's pages can send.
	if s.crossSite(r) {
		v.Code, v.Check, v.Title = code, true, "Continue signing in"
		s.render(w, r, http.StatusOK, "login.html", v)
		return
	}
	s.confirmLink(w, r, v, code)
}

// confirmLink shows whom a login code signs in, with the button that
// redeems it.
func (s *server) confirmLink(w http.ResponseWriter, r *http.Request, v *loginView, code string) {
	user, err := s.a.LoginLinkUser(r.Context(), code)
	if err != nil {
		s.linkFailed(w, r, v, code, err)
		return
	}
	v.Code, v.AsUser, v.Check, v.Title = code, user, false, "Sign in as "+user
	s.render(w, r, http.StatusOK, "login.html", v)
}

// crossSite reports whether a request came from a page of another site
// (or of another origin of this one: a sibling host, another port on
// localhost): by Sec-Fetch-Site, or in browsers without it by Origin, then
// Referer. A request with none of them (a typed URL in an old browser, a
// non-browser client) is not cross-site.
func (s *server) crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default: // same-site, cross-site
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		return !s.sameOrigin(r, o)
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		return !s.sameOrigin(r, ref)
	}
	return false
}

// sameOrigin reports whether the origin of rawURL is this server's (the
// request's Host) or one of Options.TrustedOrigins.
func (s *server) sameOrigin(r *http.Request, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	origin := strings.ToLower(u.Scheme + "://" + u.Host)
	for _, t := range s.opts.TrustedOrigins {
		if strings.ToLower(strings.TrimRight(t, "/")) == origin {
			return true
		}
	}
	return false
}

// redirectAfter sends a signed-in browser on: to next (a page that sent
// it to sign in, such as an OAuth authorization) for a user, else home.
func (s *server) redirectAfter(w http.ResponseWriter, r *http.Request, operator bool, next string) {
	if next != "" && !operator {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.redirectHome(w, r, operator)
}

func (s *server) redirectHome(w http.ResponseWriter, r *http.Request, operator bool) {
	if operator {
		s.redirect(w, r, "/status")
		return
	}
	s.redirect(w, r, "/settings")
}

// loginSubmit signs in with a token, or a login code: check=1 first shows
// whom the code signs in (the step a cross-site link skipped), else the
// code is redeemed. Each credential is checked before the lockout is
// consulted, so a valid one signs in from a locked-out address too.
func (s *server) loginSubmit(w http.ResponseWriter, r *http.Request) {
	v := &loginView{Base: s.base, Title: "Sign in", Provider: s.providerName()}
	if err := r.ParseForm(); err != nil {
		s.formError(w, r, err)
		return
	}
	v.Next = s.safeNext(r.PostForm.Get("next"))
	c, err := r.Cookie(loginCookie)
	if err != nil || !equalSecret(r.PostForm.Get(csrfField), c.Value) {
		s.refusals.Refused(s.logger, "sign-in form without its anti-forgery value", "addr", s.addrKey(r))
		v.CSRF = s.loginToken(w, r)
		v.Error = "This sign-in form has expired or did not come from this site. Please try again."
		s.render(w, r, http.StatusForbidden, "login.html", v)
		return
	}
	v.CSRF = c.Value
	var p auth.Principal
	switch token, code := strings.TrimSpace(r.PostForm.Get("token")), r.PostForm.Get("code"); {
	case code != "" && r.PostForm.Get("check") != "":
		s.confirmLink(w, r, v, code)
		return
	case code != "":
		user, err := s.a.RedeemLoginLink(r.Context(), code)
		if err != nil {
			s.linkFailed(w, r, v, code, err)
			return
		}
		p = auth.Principal{User: user}
	case token != "":
		p, err = s.a.Authenticate(r.Context(), s.addrKey(r), token)
		if err != nil {
			if errors.Is(err, auth.ErrInvalidToken) && !errors.Is(err, auth.ErrLockedOut) {
				v.Error = "That token is not valid, or it has been revoked."
				switch {
				case errors.Is(err, auth.ErrScoped):
					v.Error = "That token is limited to some servers: it works on the MCP endpoint only, not here."
				case errors.Is(err, auth.ErrExpired):
					v.Error = "That token has expired."
				}
				s.render(w, r, http.StatusUnauthorized, "login.html", v)
				return
			}
			s.loginRefused(w, r, v, err)
			return
		}
	default:
		v.Error = "Paste a token to sign in."
		s.render(w, r, http.StatusBadRequest, "login.html", v)
		return
	}
	// A fresh session ID at every sign-in; the old session, if any, ends.
	if err := s.startSession(w, r, p); err != nil {
		return
	}
	s.logger.Info("signed in to the web UI", "user", p.User, "operator", p.Operator, "token", p.TokenID)
	s.redirectAfter(w, r, p.Operator, v.Next)
}

// linkFailed answers a bad login code: it counts towards the lockout of
// the address and of the code, and is logged by fingerprint only.
func (s *server) linkFailed(w http.ResponseWriter, r *http.Request, v *loginView, code string, err error) {
	if !errors.Is(err, auth.ErrInvalidCode) {
		s.logger.Error("checking a login link", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Sign-in failed", "The link could not be checked; the host's log has the details.")
		return
	}
	addr := s.addrKey(r)
	lerr := s.a.Limiter().Fail(addr, code)
	s.refusals.Refused(s.logger, "login link refused", "addr", addr, "code_sha256", auth.Fingerprint(code), "locked_out", lerr != nil)
	if lerr != nil {
		s.loginRefused(w, r, v, lerr)
		return
	}
	v.Code, v.AsUser, v.Check = "", "", false
	v.Error = "This sign-in link is not valid: it was already used, it has expired (links last 15 minutes), or it was mistyped. " +
		"Ask for a new one (agenthost login-link --user YOU), or sign in with a token."
	s.render(w, r, http.StatusUnauthorized, "login.html", v)
}

// loginRefused answers a failure while locked out (429) or an internal
// error. The sign-in form stays: a valid token or link still works.
func (s *server) loginRefused(w http.ResponseWriter, r *http.Request, v *loginView, err error) {
	var le *auth.LockoutError
	if errors.As(err, &le) {
		retryAfter(w, err)
		v.Code, v.AsUser, v.Check = "", "", false
		v.Error = "Too many failed sign-in attempts. Failed attempts are refused for " +
			humanDuration(le.RetryAfter) + " (until " + le.Until.UTC().Format("15:04:05 UTC") +
			"); a valid token or sign-in link still works."
		s.render(w, r, http.StatusTooManyRequests, "login.html", v)
		return
	}
	s.logger.Error("signing in", "err", err)
	s.errorPage(w, r, http.StatusInternalServerError, "Sign-in failed", "The sign-in could not be checked; the host's log has the details.")
}

func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	if err := s.a.DeleteSession(r.Context(), ws.ID); err != nil {
		s.logger.Error("signing out", "err", err)
	}
	s.setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, s.path("/settings/login?signed-out=1"), http.StatusSeeOther)
}

// humanDuration reads "15 minutes", "1 minute", "40 seconds".
func humanDuration(d time.Duration) string {
	unit, n := "second", int((d+time.Second-1)/time.Second)
	if d >= time.Minute {
		unit, n = "minute", int((d+time.Minute-1)/time.Minute)
	}
	if n != 1 {
		unit += "s"
	}
	return strconv.Itoa(n) + " " + unit
}

// providerName is the OpenID Connect provider's name, "" without one.
func (s *server) providerName() string {
	if s.opts.OIDC == nil {
		return ""
	}
	return s.opts.OIDC.Name()
}
