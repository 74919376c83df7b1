package web

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/host/internal/oauthflow"
)

// connectView is what connect.html shows: the resource a sign-in is for,
// and once the sign-in started, where it goes on (AuthURL, at Provider).
type connectView struct {
	Base, CSRF, Ext, Name, Action string
	AuthURL, Provider             string
}

// connectPage asks before it starts a sign-in: the link in a status line
// or a tool's error leads here, and following a link must not start a
// sign-in by itself.
func (s *server) connectPage(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	extName, name := chi.URLParam(r, "ext"), chi.URLParam(r, "name")
	if !s.canConnect(w, r, ws, extName) {
		return
	}
	s.render(w, r, http.StatusOK, "connect.html", &connectView{Base: s.base, CSRF: ws.CSRF, Ext: extName, Name: name,
		Action: s.path("/settings/connect/" + extName + "/" + name)})
}

// connect starts the extension's sign-in of the session's user to the
// resource and sends the browser on to the authorization server. Not by a
// redirect: a browser checks every redirect of a form's submission against
// the submitting page's form-action ('self'), so a 303 to the provider is
// blocked. The answer is a page of our own whose link to the provider
// app.js follows at once (a link is no form submission; without script,
// the person clicks it). The sign-in's binding cookie is set on this
// answer, as it would be on a redirect.
func (s *server) connect(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	extName, name := chi.URLParam(r, "ext"), chi.URLParam(r, "name")
	if !s.canConnect(w, r, ws, extName) {
		return
	}
	authURL, err := s.opts.SignIn(w, r, ws.User, extName, name)
	if err != nil {
		s.logger.Warn("starting a sign-in failed", "user", ws.User, "extension", extName, "resource", name, "err", err)
		s.errorPage(w, r, http.StatusBadRequest, "Could not connect "+name, oauthflow.Explain(err))
		return
	}
	u, err := url.Parse(authURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		s.logger.Warn("a sign-in's authorization URL is not a web address", "user", ws.User, "extension", extName, "resource", name)
		s.errorPage(w, r, http.StatusBadGateway, "Could not connect "+name, "The sign-in's address is not a web address.")
		return
	}
	s.render(w, r, http.StatusOK, "connect.html", &connectView{Base: s.base, Ext: extName, Name: name,
		AuthURL: u.String(), Provider: u.Host})
}

// canConnect answers the requests that cannot start a sign-in.
func (s *server) canConnect(w http.ResponseWriter, r *http.Request, ws *webSession, extName string) bool {
	switch {
	case s.opts.SignIn == nil:
		s.errorPage(w, r, http.StatusNotFound, "Not found", "This host signs nobody in to other services.")
	case ws.Operator:
		s.errorPage(w, r, http.StatusForbidden, "Forbidden",
			"The operator signs in to shared servers with the CLI: agenthost auth login --operator SERVER.")
	case !s.hasExtension(r.Context(), extName):
		s.errorPage(w, r, http.StatusNotFound, "Not found", "There is no such extension.")
	default:
		return true
	}
	return false
}
