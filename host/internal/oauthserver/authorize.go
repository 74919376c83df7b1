package oauthserver

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ory/fosite"
	"golang.org/x/crypto/bcrypt"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
)

//go:embed templates/*.html
var templateFS embed.FS

// Form fields of the authorization pages that are not OAuth parameters.
const (
	fieldCSRF       = "_csrf"
	fieldAction     = "action"
	fieldPassphrase = "passphrase"
)

// pageView is what authorize.html shows.
type pageView struct {
	Static     string
	Mode       string // "signin", "consent" or "error"
	Title      string
	Error      string
	Notice     string
	User       string
	Client     string
	ClientID   string
	ClientURI  string
	Unverified bool // the name is the client's own claim
	ReturnHost string
	Scopes     []scopeView
	Params     []paramView // the authorization request, re-posted
	CSRF       string
	LoginURL   string
	// Provider and ProviderURL: the sign-in with the operator's OpenID
	// Connect provider, offered first ("" without one).
	Provider, ProviderURL string
	Passphrase            bool
	Locked                bool
	// formTarget is the redirect URI a form post of this page ends at.
	formTarget string
}

type scopeView struct{ Name, Text string }

type paramView struct{ Name, Value string }

// authorize is the authorization endpoint. GET shows the consent page
// (or the sign-in first); POST carries the user's decision or the
// passphrase, with the request's parameters re-posted.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		s.page(w, r, http.StatusMethodNotAllowed, &pageView{Mode: "error", Title: "Method not allowed", Error: "Use GET or POST."})
		return
	}
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.page(w, r, http.StatusBadRequest, &pageView{Mode: "error", Title: "Bad request", Error: "The request could not be read."})
		return
	}
	user, sessCSRF, signedIn := s.opts.Sessions.User(w, r)
	post := r.Method == http.MethodPost
	csrfOK := post && signedIn && s.opts.Sessions.ValidCSRF(r, sessCSRF)
	formTokenOK := post && s.opts.Sessions.ValidFormToken(r)
	// Our own fields are taken out before fosite sees the form.
	action, passphrase := r.Form.Get(fieldAction), r.Form.Get(fieldPassphrase)
	for _, f := range []string{fieldAction, fieldCSRF, fieldPassphrase} {
		r.Form.Del(f)
		r.PostForm.Del(f)
	}
	params := maps.Clone(r.Form) // as the client sent them, to re-post
	resource, resourceOK := s.checkResource(r.Form)
	r.Form.Set("audience", resource)
	r.Form.Set("scope", strings.Join(s.requestedScopes(r.Form.Get("scope")), " "))

	if ru := r.Form.Get("redirect_uri"); ru != "" {
		r = r.WithContext(context.WithValue(ctx, redirectKey{}, ru))
		ctx = r.Context()
	}
	ar, err := s.provider.NewAuthorizeRequest(ctx, r)
	if err != nil {
		s.authorizeError(w, r, ar, err)
		return
	}
	switch {
	case !resourceOK:
		s.authorizeError(w, r, ar, errInvalidTarget)
		return
	case ar.GetRequestForm().Get("code_challenge") == "":
		s.authorizeError(w, r, ar, fosite.ErrInvalidRequest.WithHint("A PKCE code_challenge (method S256) is required."))
		return
	case ar.GetRequestForm().Get("code_challenge_method") != "S256":
		s.authorizeError(w, r, ar, fosite.ErrInvalidRequest.WithHint("The code_challenge_method must be S256; plain is not allowed."))
		return
	}
	fc, _ := ar.GetClient().(*fositeClient)
	if fc == nil {
		s.authorizeError(w, r, ar, fosite.ErrServerError)
		return
	}
	v := s.consentView(fc.c, ar, params)
	if post {
		switch {
		case action == "passphrase" && s.opts.Passphrase != nil:
			if !formTokenOK {
				v.Error = "This form has expired or did not come from this site. Please try again."
				s.signIn(w, r, http.StatusForbidden, v)
				return
			}
			if !s.checkPassphrase(w, r, v, fc.c, passphrase) {
				return
			}
			// The passphrase form names the app and its scopes: posting
			// it is the consent.
			s.grant(w, r, ar, fc.c, s.opts.Passphrase.User)
			return
		case action == "allow" || action == "deny":
			if !signedIn {
				v.Notice = "Your session ended before you decided. Sign in again; nothing was granted."
				s.signIn(w, r, http.StatusUnauthorized, v)
				return
			}
			if !csrfOK {
				s.opts.Refusals.Refused(s.log, "oauth: consent without a valid CSRF token", "addr", s.opts.AddrKey(r))
				s.page(w, r, http.StatusForbidden, &pageView{Mode: "error", Title: "Forbidden",
					Error: "This form has expired or did not come from this site. Start again from the app."})
				return
			}
			if action == "deny" {
				s.log.Info("oauth: the user denied a client", "user", user, "client", clip(fc.c.ID))
				s.errorRedirect(w, r, ar, fosite.ErrAccessDenied.WithHint("The user denied the request."))
				return
			}
			s.grant(w, r, ar, fc.c, user)
			return
		}
	}
	if !signedIn {
		s.signIn(w, r, http.StatusOK, v)
		return
	}
	v.Mode, v.Title, v.User, v.CSRF = "consent", "Connect "+v.Client+"?", user, sessCSRF
	s.page(w, r, http.StatusOK, v)
}

// checkResource returns the request's resource (RFC 8707), defaulted to
// this server's, and whether it is this server's.
func (s *Server) checkResource(form url.Values) (string, bool) {
	switch res := form["resource"]; {
	case len(res) == 0 || (len(res) == 1 && res[0] == ""):
		return s.Resource(), true
	case len(res) == 1 && res[0] == s.Resource():
		return res[0], true
	}
	return s.Resource(), false
}

// requestedScopes keeps the scopes this server knows (mcp always).
func (s *Server) requestedScopes(scope string) []string {
	out := []string{ScopeMCP}
	if slices.Contains(strings.Fields(scope), ScopeOfflineAccess) {
		out = append(out, ScopeOfflineAccess)
	}
	return out
}

// consentView describes the client and what it asks for.
func (s *Server) consentView(c *Client, ar fosite.AuthorizeRequester, params url.Values) *pageView {
	v := &pageView{Client: c.displayName(), ClientID: c.ID, ClientURI: c.URI, Unverified: !c.Document,
		ReturnHost: ar.GetRedirectURI().Host, formTarget: ar.GetRedirectURI().String()}
	for _, sc := range ar.GetRequestedScopes() {
		if sc == ScopeOfflineAccess && !slices.Contains(c.GrantTypes, "refresh_token") {
			continue
		}
		v.Scopes = append(v.Scopes, scopeView{Name: sc, Text: scopeText[sc]})
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range params {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, val := range params[k] {
			v.Params = append(v.Params, paramView{Name: k, Value: val})
		}
	}
	return v
}

// signIn shows the sign-in choices: the settings sign-in, which comes
// back here, and the passphrase when the operator set one.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, code int, v *pageView) {
	q := url.Values{}
	for _, p := range v.Params {
		q.Add(p.Name, p.Value)
	}
	v.Mode, v.Title = "signin", "Sign in to connect "+v.Client
	v.LoginURL = s.opts.Sessions.LoginURL(s.basePath() + PathAuthorize + "?" + q.Encode())
	v.Provider, v.ProviderURL = s.opts.Sessions.ProviderLogin(s.basePath() + PathAuthorize + "?" + q.Encode())
	if s.opts.Passphrase != nil {
		v.Passphrase, v.CSRF = true, s.opts.Sessions.FormToken(w, r)
	}
	s.page(w, r, code, v)
}

// passphraseCredential is what a wrong passphrase counts against in the
// limiter, besides the client's address: the gate itself, so that guesses
// spread over many addresses lock it too. (The guess is not passed: the
// limiter logs a credential's fingerprint, which must never be a
// password's.)
const passphraseCredential = "oauth passphrase gate"

// checkPassphrase checks a posted passphrase; on a wrong one, or while
// the gate is locked or busy, it answers itself and returns false. Unlike
// a token, a passphrase can be guessed, and its check is slow (bcrypt),
// so the guess is counted before it is checked (the limiter's Attempt):
// once the client's address or the gate is locked out no guess is
// checked, not even one that was sent at the same time as those that
// locked it. The checks run one at a time ([maxCompares]); at most
// [maxWaiting] wait for their turn, others are refused at once (429).
func (s *Server) checkPassphrase(w http.ResponseWriter, r *http.Request, v *pageView, c *Client, passphrase string) bool {
	addr := s.opts.AddrKey(r)
	if n := s.waiting.Add(1); n > maxWaiting {
		s.waiting.Add(-1)
		s.opts.Refusals.Refused(s.log, "oauth: passphrase refused unchecked: too many being checked", "addr", addr)
		s.busy(w, r, v)
		return false
	}
	var lerr error
	if s.opts.Limiter != nil {
		var refused error
		lerr, refused = s.opts.Limiter.Attempt(addr, passphraseCredential)
		if refused != nil {
			s.waiting.Add(-1)
			s.opts.Refusals.Refused(s.log, "oauth: passphrase refused unchecked: locked out", "addr", addr, "client", clip(c.ID))
			s.locked(w, r, v, refused)
			return false
		}
	}
	select {
	case s.compares <- struct{}{}:
	case <-r.Context().Done():
		s.waiting.Add(-1)
		return false
	}
	ok := compareOwnP([]byte(s.opts.Passphrase.Hash), []byte(passphrase))
	<-s.compares
	s.waiting.Add(-1)
	if ok {
		return true
	}
	s.opts.Refusals.Refused(s.log, "oauth: wrong passphrase", "addr", addr, "client", clip(c.ID), "locked_out", lerr != nil)
	if lerr != nil {
		s.locked(w, r, v, lerr)
		return false
	}
	v.Error = "That passphrase is not right."
	s.signIn(w, r, http.StatusUnauthorized, v)
	return false
}

// compareOwnP is bcrypt's check, on a P (GOMAXPROCS) of its own: the
// host may run on fewer Ps than cores (on two, one), and a check holds
// its P for its whole time (a quarter of a second at cost 12; Go
// preempts every 10 ms), which would make every other request of the
// host wait behind it. An extra P for the time of the check leaves the
// others theirs; the kernel shares the cores. Checks run one at a time
// in the process (ownP), so the count goes back to where it was; nothing
// else in the host changes GOMAXPROCS once it runs.
func compareOwnP(hash, passphrase []byte) bool {
	ownP.Lock()
	defer ownP.Unlock()
	procs := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(procs + 1)
	defer runtime.GOMAXPROCS(procs)
	return bcrypt.CompareHashAndPassword(hash, passphrase) == nil
}

// ownP serialises compareOwnP across servers.
var ownP sync.Mutex

// Bounds of passphrase checks (bcrypt: a core for tens to hundreds of
// milliseconds each), so that guesses cannot take the host's cores from
// its users' calls: maxCompares run at once, maxWaiting (those running
// included) are admitted; the limiter admits only a few guesses a window
// anyway.
const (
	maxCompares = 1
	maxWaiting  = 8
)

// locked answers a locked-out passphrase gate (429); lerr is the
// limiter's *auth.LockoutError.
func (s *Server) locked(w http.ResponseWriter, r *http.Request, v *pageView, lerr error) {
	wait := time.Second
	var le *auth.LockoutError
	if errors.As(lerr, &le) {
		wait = le.RetryAfter
	}
	secs := max(1, int((wait+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	v.Mode, v.Title, v.Locked = "error", "Locked out", true
	v.Error = fmt.Sprintf("Too many passphrases tried: try again in %d seconds, or sign in to agenthost instead.", secs)
	s.page(w, r, http.StatusTooManyRequests, v)
}

// busy answers a passphrase posted while too many wait to be checked.
func (s *Server) busy(w http.ResponseWriter, r *http.Request, v *pageView) {
	w.Header().Set("Retry-After", "1")
	v.Mode, v.Title, v.Locked = "error", "Busy", true
	v.Error = "Too many passphrases are being checked: try again in a second."
	s.page(w, r, http.StatusTooManyRequests, v)
}

// grant issues the authorization code for user after consent.
func (s *Server) grant(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, c *Client, user string) {
	ctx := r.Context()
	for _, sc := range ar.GetRequestedScopes() {
		if sc == ScopeOfflineAccess && !slices.Contains(c.GrantTypes, "refresh_token") {
			continue
		}
		ar.GrantScope(sc)
	}
	ar.GrantAudience(s.Resource())
	if s.opts.Admit != nil {
		if err := s.opts.Admit(ctx, user); err != nil {
			s.log.Warn("oauth: grant refused to a user the host does not admit", "user", user, "client", clip(c.ID), "err", err)
			s.errorRedirect(w, r, ar, fosite.ErrAccessDenied.WithHint("This user may not connect apps (disabled by the operator)."))
			return
		}
	}
	g := api.Grant{ID: ar.GetID(), User: user, ClientID: c.ID, Client: c.displayName(), ClientURI: c.URI,
		Scopes: ar.GetGrantedScopes(), Created: s.now().Truncate(time.Second)}
	if err := s.store.CreateGrant(ctx, g); err != nil {
		s.log.Error("oauth: storing a grant", "err", err)
		s.errorRedirect(w, r, ar, fosite.ErrServerError.WithHint("The grant could not be stored."))
		return
	}
	sess := &fosite.DefaultSession{Subject: user, Username: user}
	resp, err := s.provider.NewAuthorizeResponse(ctx, ar, sess)
	if err != nil {
		s.errorRedirect(w, r, ar, err)
		return
	}
	// RFC 9207: the client checks who answered.
	resp.AddParameter("iss", s.issuer())
	s.log.Info("oauth: grant given", "user", user, "client", clip(c.ID), "grant", g.ID, "scopes", g.Scopes)
	s.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
}

// authorizeError answers an authorization request refused before the
// user decided anything: back to the client's redirect URI with error,
// state and iss when that URI is registered and trusted
// ([Server.trustedRedirect]), else on a page here. A redirect to an
// unchecked URI would be an open redirector; so would one to any URI
// anyone may register (RFC 9700 §4.11.2).
func (s *Server) authorizeError(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, err error) {
	if ar != nil && ar.IsRedirectURIValid() && ar.GetRedirectURI() != nil && !s.trustedRedirect(r.Context(), ar) {
		s.refusedPage(w, r, err)
		return
	}
	s.errorRedirect(w, r, ar, err)
}

// trustedRedirect reports whether an error may be sent to a request's
// registered redirect URI without the user having seen where it goes. RFC
// 9700 §4.11.2: a server that lets anyone register redirect URIs must not
// redirect to them on an error unless it trusts them. Trusted are a
// loopback http URI (a native app on the user's own machine, RFC 8252:
// nobody else's site) and the URI of a client a user of this host has
// consented to (its grant is on record: that user saw the host it sends
// people back to). A fresh registration or a metadata document naming
// https://evil.example is neither: its errors are shown here.
func (s *Server) trustedRedirect(ctx context.Context, ar fosite.AuthorizeRequester) bool {
	u := ar.GetRedirectURI()
	if u.Scheme == "http" && isLoopback(u.Hostname()) {
		return true
	}
	ok, err := s.store.ClientGranted(ctx, ar.GetClient().GetID())
	if err != nil {
		s.log.Warn("oauth: looking up a client's grants", "client", clip(ar.GetClient().GetID()), "err", err)
	}
	return ok
}

// refusedPage shows a refused authorization request's error here.
func (s *Server) refusedPage(w http.ResponseWriter, r *http.Request, err error) {
	s.logRefused(r, "authorize", err)
	rfc := s.toRFC6749(err)
	msg := rfc.GetDescription()
	if rfc.ErrorField == fosite.ErrInvalidClient.ErrorField {
		// fosite hides why; the reason is the client's, safe to show.
		if _, cerr := s.client(r.Context(), r.Form.Get("client_id")); cerr != nil {
			msg = "The app's client_id is not usable here: " + clientHint(cerr)
		}
	}
	s.page(w, r, rfc.CodeField, &pageView{Mode: "error", Title: "This app's request was refused", Error: msg})
}

func (s *Server) toRFC6749(err error) *fosite.RFC6749Error {
	if errors.Is(err, errInvalidTarget) {
		return s.invalidTarget()
	}
	return fosite.ErrorToRFC6749Error(err)
}

// errorRedirect answers a refused authorization request back at the
// client's redirect URI with error, state and iss when that URI is
// valid (registered), else on a page here. Called directly, without the
// trust check, only once the user decided (denied, or consented and the
// grant failed): they saw where the app sends them back.
func (s *Server) errorRedirect(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, err error) {
	if ar == nil || !ar.IsRedirectURIValid() || ar.GetRedirectURI() == nil {
		s.refusedPage(w, r, err)
		return
	}
	s.logRefused(r, "authorize", err)
	rfc := s.toRFC6749(err)
	u := *ar.GetRedirectURI()
	q := u.Query()
	for k, vs := range rfc.ToValues() {
		q[k] = vs
	}
	if st := ar.GetState(); st != "" {
		q.Set("state", st)
	}
	q.Set("iss", s.issuer())
	u.RawQuery, u.Fragment = q.Encode(), ""
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// page renders authorize.html with the headers of every page here: not
// frameable, no referrer, no caching. CSP form-action also covers the
// redirect that ends a post, so it names the client's redirect URI.
func (s *Server) page(w http.ResponseWriter, r *http.Request, code int, v *pageView) {
	v.Static = s.basePath()
	formAction := "'self'"
	if u, err := url.Parse(v.formTarget); err == nil && u.Scheme != "" && u.Host != "" {
		formAction += " " + u.Scheme + "://" + u.Host
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action "+formAction+
		"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, "authorize.html", v); err != nil {
		s.log.Error("oauth: rendering a page", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
