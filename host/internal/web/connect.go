package web

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/host/internal/oauthflow"
)

// connectView is what connect.html shows: the resource a sign-in is for.
type connectView struct {
	Base, CSRF, Ext, Name, Action string
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
// resource and sends the browser to the authorization server.
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
	http.Redirect(w, r, authURL, http.StatusSeeOther)
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
