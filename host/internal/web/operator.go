package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
)

// The operator's page of users (/users) and its JSON API
// (/api/operator/v1/users): who exists, when they last came, what they
// hold (tokens, connected apps), their servers' trouble, and the actions
// disable, enable, delete, revoke a token, revoke an app. The page is
// for an operator's web session (its forms carry the session's CSRF
// token); the API for an operator bearer token.

// operatorUser is one user on the operator page.
type operatorUser struct {
	control.UserInfo
	TokenList []auth.Token
	AppList   []api.Grant
}

func (s *server) operatorRoutes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.requireSession, s.requireOperatorSession)
		r.Get("/users", s.usersPage)
		r.Post("/users/{user}/disable", s.userAction)
		r.Post("/users/{user}/enable", s.userAction)
		r.Post("/users/{user}/delete", s.userAction)
		r.Post("/users/{user}/tokens/revoke", s.userAction)
		r.Post("/users/{user}/apps/revoke", s.userAction)
	})
	r.Route("/api/operator/v1", func(r chi.Router) {
		r.Use(s.requireOperatorBearer)
		r.NotFound(s.apiNotFound)
		r.MethodNotAllowed(s.apiMethodNotAllowed)
		r.Get("/users", s.apiUsers)
		r.Get("/audit", s.apiOperatorAudit)
		r.Get("/pins", s.apiOperatorPins)
		r.Post("/pins/approve", s.apiOperatorApprovePins)
		r.Post("/users/{user}/disable", s.apiUserAction)
		r.Post("/users/{user}/enable", s.apiUserAction)
		r.Post("/users/{user}/delete", s.apiUserAction)
		r.Post("/extensions/{ext}/actions/{action}", s.apiOperatorAction)
	})
}

// requireOperatorSession admits the operator's web session only.
func (s *server) requireOperatorSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ws := sessionFrom(r.Context()); !ws.Operator {
			s.errorPage(w, r, http.StatusForbidden, "Forbidden", "The users page is for the operator; you are signed in as "+ws.User+".")
			return
		}
		if s.opts.Users == nil {
			s.errorPage(w, r, http.StatusNotImplemented, "Not available", "This host keeps no users.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireOperatorBearer admits an operator token only.
func (s *server) requireOperatorBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if !p.Operator {
			writeError(w, http.StatusForbidden, "the operator API needs an operator token (agenthost token create --operator)", nil)
			return
		}
		if s.opts.Users == nil {
			writeError(w, http.StatusNotImplemented, "this host keeps no users", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) operatorUsers(ctx context.Context) ([]operatorUser, error) {
	users, err := s.opts.Users.ListUsers(ctx)
	if err != nil {
		return nil, err
	}
	toks, err := s.a.ListTokens(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]operatorUser, 0, len(users))
	for _, u := range users {
		ou := operatorUser{UserInfo: u}
		for _, t := range toks {
			if !t.Operator && t.User == u.Name {
				ou.TokenList = append(ou.TokenList, t)
			}
		}
		if s.opts.Apps != nil {
			if g, err := s.opts.Apps.Grants(ctx, u.Name); err == nil {
				ou.AppList = g
			}
		}
		out = append(out, ou)
	}
	return out, nil
}

func (s *server) usersPage(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	users, err := s.operatorUsers(r.Context())
	if err != nil {
		s.logger.Error("listing users", "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Users unavailable", "The users could not be read; the host's log has the details.")
		return
	}
	var flash string
	if done := r.URL.Query().Get("done"); done != "" {
		flash = strings.TrimSpace(done)
		if len(flash) > 200 {
			flash = flash[:200]
		}
	}
	s.render(w, r, http.StatusOK, "users.html", map[string]any{"Base": s.base, "CSRF": ws.CSRF, "Users": users,
		"Flash": flash, "Apps": s.opts.Apps != nil})
}

// doUserAction runs the action the path names on user; done says what
// happened, for the page's notice.
func (s *server) doUserAction(ctx context.Context, action, user string, form url.Values) (done string, err error) {
	adm := s.opts.Users
	switch action {
	case "disable":
		return "Disabled " + user + ": their tokens, sessions, connected apps and processes are stopped.", adm.DisableUser(ctx, user)
	case "enable":
		return "Enabled " + user + ".", adm.EnableUser(ctx, user)
	case "delete":
		res, err := adm.DeleteUser(ctx, user, form.Get("delete_data") == "1")
		if err != nil {
			return "", err
		}
		if res.DataDeleted {
			return "Deleted " + user + " and their data folder.", nil
		}
		return "Deleted " + user + "; their data folder is kept: " + res.Folder, nil
	case "tokens/revoke":
		id := form.Get("id")
		toks, err := s.a.ListTokens(ctx, user)
		if err != nil {
			return "", err
		}
		for _, t := range toks {
			if t.ID == id {
				return "Revoked token " + t.Name + " of " + user + ".", mapAuthErr(s.a.RevokeToken(ctx, id))
			}
		}
		return "", ext.Mark(errors.New("no such token of "+user), ext.ErrNotFound)
	case "apps/revoke":
		if s.opts.Apps == nil {
			return "", ext.Mark(errors.New("this host connects no apps"), ext.ErrNotFound)
		}
		return "Revoked a connected app of " + user + ".", s.opts.Apps.RevokeGrant(ctx, user, form.Get("id"))
	}
	return "", ext.Mark(errors.New("no such action"), ext.ErrNotFound)
}

// actionOf is the action a /users/{user}/... path names.
func actionOf(r *http.Request) string {
	p := r.URL.Path
	i := strings.Index(p, "/users/")
	if i < 0 {
		return ""
	}
	rest := p[i+len("/users/"):]
	if j := strings.Index(rest, "/"); j >= 0 {
		return rest[j+1:]
	}
	return ""
}

func (s *server) userAction(w http.ResponseWriter, r *http.Request) {
	user := chi.URLParam(r, "user")
	done, err := s.doUserAction(r.Context(), actionOf(r), user, r.PostForm)
	if err != nil {
		code, msg := s.hostErrStatus(r, err)
		s.errorPage(w, r, code, "Not done", msg)
		return
	}
	s.logger.Info("operator page: "+actionOf(r), "user", user)
	http.Redirect(w, r, s.path("/users?done="+url.QueryEscape(done)), http.StatusSeeOther)
}

func (s *server) apiUsers(w http.ResponseWriter, r *http.Request) {
	users, err := s.operatorUsers(r.Context())
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, users)
}

func (s *server) apiUserAction(w http.ResponseWriter, r *http.Request) {
	var in struct {
		DeleteData bool `json:"deleteData"`
	}
	if body, ok := s.readBody(w, r); !ok {
		return
	} else if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			writeError(w, http.StatusBadRequest, `the body must be empty or {"deleteData": true|false}`, nil)
			return
		}
	}
	form := url.Values{}
	if in.DeleteData {
		form.Set("delete_data", "1")
	}
	done, err := s.doUserAction(r.Context(), actionOf(r), chi.URLParam(r, "user"), form)
	if err != nil {
		s.apiHostError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"done": done})
}
