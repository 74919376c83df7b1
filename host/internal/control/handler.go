package control

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// Handler is the control API over h (tokens and auth may be nil).
func Handler(h Host, tokens Tokens, auth Auth) http.Handler {
	mux := http.NewServeMux()
	q := func(r *http.Request, k string) string { return r.URL.Query().Get(k) }
	ok := struct{}{}
	// get serves a route without a body; do (below) one with a JSON body.
	get := func(pattern string, fn func(r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			v, err := fn(r)
			reply(w, v, err)
		})
	}
	needTokens := func() error {
		if tokens == nil {
			return fmt.Errorf("this host issues no tokens: %w", ext.ErrUnimplemented)
		}
		return nil
	}

	needAuth := func() error {
		if auth == nil {
			return fmt.Errorf("this host carries no sign-ins: %w", ext.ErrUnimplemented)
		}
		return nil
	}

	get("GET /v1/tools", func(r *http.Request) (any, error) { return h.Tools(r.Context(), q(r, "user")) })
	do(mux, "POST /v1/call", func(r *http.Request, req *callRequest) (any, error) {
		var res *ext.CallToolResult
		var err error
		if ct, ok := h.(api.Caller); ok {
			// The audit log names the CLI as the credential.
			res, err = ct.CallTool(r.Context(), &api.CallRequest{User: req.User, Conversation: req.Conversation, Name: req.Name,
				Arguments: req.Arguments, Credential: "cli"})
		} else {
			res, err = h.Call(r.Context(), req.User, req.Conversation, req.Name, req.Arguments)
		}
		if err == nil {
			res, err = res.Fields()
		}
		if err != nil {
			return nil, err
		}
		return callResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}, nil
	})
	do(mux, "POST /v1/actions", func(r *http.Request, req *actionRequest) (any, error) {
		ah, ok := h.(ActionHost)
		if !ok {
			return nil, fmt.Errorf("this host runs no actions: %w", ext.ErrUnimplemented)
		}
		msg, err := ah.RunAction(r.Context(), api.OperatorUser, req.Extension, req.User, req.Name, req.Action)
		if err != nil {
			return nil, err
		}
		return actionResult{Message: msg}, nil
	})
	get("GET /v1/audit", func(r *http.Request) (any, error) {
		a, ok := h.(Auditor)
		if !ok {
			return nil, fmt.Errorf("this host keeps no audit log: %w", ext.ErrUnimplemented)
		}
		f, err := audit.ParseFilter(r.URL.Query())
		if err != nil {
			return nil, err
		}
		recs, err := a.Audit(r.Context(), f)
		if recs == nil && err == nil {
			recs = []audit.Record{}
		}
		return recs, err
	})
	pinner := func() (Pinner, error) {
		p, ok := h.(Pinner)
		if !ok {
			return nil, fmt.Errorf("this host pins no tools: %w", ext.ErrUnimplemented)
		}
		return p, nil
	}
	get("GET /v1/pins", func(r *http.Request) (any, error) {
		p, err := pinner()
		if err != nil {
			return nil, err
		}
		return p.Pins(r.Context(), q(r, "user"), q(r, "server"), q(r, "all") == "true")
	})
	do(mux, "POST /v1/pins/approve", func(r *http.Request, req *PinApproveRequest) (any, error) {
		p, err := pinner()
		if err != nil {
			return nil, err
		}
		return p.ApprovePins(r.Context(), pins.Approval{Server: req.Server, Tool: req.Tool, User: req.User}, "cli")
	})
	do(mux, "POST /v1/reload", func(r *http.Request, _ *struct{}) (any, error) {
		rl, ok := h.(Reloader)
		if !ok {
			return nil, fmt.Errorf("this host cannot reload its file: %w", ext.ErrUnimplemented)
		}
		return rl.Reload(r.Context())
	})
	get("GET /v1/fleet", func(r *http.Request) (any, error) {
		f, ok := h.(Fleeter)
		if !ok {
			return nil, fmt.Errorf("this host keeps no fleet view: %w", ext.ErrUnimplemented)
		}
		return f.Fleet(r.Context())
	})
	get("GET /v1/sections", func(r *http.Request) (any, error) { return h.Sections(r.Context()) })
	get("GET /v1/settings", func(r *http.Request) (any, error) {
		return h.GetSettings(r.Context(), q(r, "user"), q(r, "ext"), q(r, "section"))
	})
	do(mux, "PUT /v1/settings", func(r *http.Request, req *settingsRequest) (any, error) {
		return ok, h.SetSettings(r.Context(), req.User, req.Extension, req.Section, req.Values)
	})
	do(mux, "PATCH /v1/settings", func(r *http.Request, req *settingsRequest) (any, error) {
		return ok, h.PatchSettings(r.Context(), req.User, req.Extension, req.Section, req.Values)
	})
	do(mux, "PUT /v1/secret", func(r *http.Request, req *secretRequest) (any, error) {
		return ok, h.SetSecret(r.Context(), req.User, req.Extension, req.Name, req.Value)
	})
	get("DELETE /v1/secret", func(r *http.Request) (any, error) {
		return ok, h.DeleteSecret(r.Context(), q(r, "user"), q(r, "ext"), q(r, "name"))
	})
	get("GET /v1/status", func(r *http.Request) (any, error) { return h.Status(r.Context(), q(r, "user")) })
	get("GET /v1/overview", func(r *http.Request) (any, error) { return h.Overview(r.Context()) })
	get("GET /v1/extensions", func(r *http.Request) (any, error) { return h.Extensions(r.Context()) })
	do(mux, "POST /v1/tokens", func(r *http.Request, req *tokenRequest) (any, error) {
		if err := needTokens(); err != nil {
			return nil, err
		}
		if req.Scope != nil || !req.Expires.IsZero() {
			if req.Operator {
				return nil, fmt.Errorf("an operator token has no scope or expiry: %w", ext.ErrInvalidArgument)
			}
			plain, info, err := tokens.CreateScopedToken(r.Context(), req.User, req.Name, req.Scope, req.Expires)
			return tokenCreated{Token: plain, Info: info}, err
		}
		plain, info, err := tokens.CreateToken(r.Context(), req.User, req.Name, req.Operator)
		return tokenCreated{Token: plain, Info: info}, err
	})
	get("GET /v1/tokens", func(r *http.Request) (any, error) {
		if err := needTokens(); err != nil {
			return nil, err
		}
		return tokens.ListTokens(r.Context(), q(r, "user"))
	})
	get("DELETE /v1/tokens", func(r *http.Request) (any, error) {
		if err := needTokens(); err != nil {
			return nil, err
		}
		return ok, tokens.RevokeToken(r.Context(), q(r, "id"))
	})
	do(mux, "POST /v1/login-links", func(r *http.Request, req *tokenRequest) (any, error) {
		if err := needTokens(); err != nil {
			return nil, err
		}
		url, err := tokens.CreateLoginLink(r.Context(), req.User)
		return loginLink{URL: url}, err
	})
	do(mux, "POST /v1/auth", func(r *http.Request, req *authRequest) (any, error) {
		if err := needAuth(); err != nil {
			return nil, err
		}
		return auth.Begin(r.Context(), req.User, req.Extension, req.Name)
	})
	get("GET /v1/auth", func(r *http.Request) (any, error) {
		if err := needAuth(); err != nil {
			return nil, err
		}
		return auth.Wait(r.Context(), q(r, "state"))
	})
	userRoutes(mux, tokens)
	return mux
}

// do registers a route whose JSON body decodes into a Req.
func do[Req any](mux *http.ServeMux, pattern string, fn func(r *http.Request, req *Req) (any, error)) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
			writeError(w, fmt.Errorf("decoding the request: %v: %w", err, ext.ErrInvalidArgument))
			return
		}
		v, err := fn(r, &req)
		reply(w, v, err)
	})
}

// reply writes v, or the error.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

type actionRequest struct {
	Extension string `json:"extension"`
	User      string `json:"user"`
	Name      string `json:"name"`
	Action    string `json:"action"`
}

type actionResult struct {
	Message string `json:"message"`
}

type callRequest struct {
	User         string          `json:"user"`
	Conversation string          `json:"conversation,omitempty"`
	Name         string          `json:"name"`
	Arguments    json.RawMessage `json:"arguments,omitempty"`
}

type callResult struct {
	Content           json.RawMessage `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
}

type settingsRequest struct {
	User      string          `json:"user"`
	Extension string          `json:"ext"`
	Section   string          `json:"section"`
	Values    json.RawMessage `json:"values"`
}

type secretRequest struct {
	User      string `json:"user"`
	Extension string `json:"ext"`
	Name      string `json:"name"`
	Value     string `json:"value"`
}

type tokenRequest struct {
	User     string     `json:"user,omitempty"`
	Name     string     `json:"name,omitempty"`
	Operator bool       `json:"operator,omitempty"`
	Scope    *ext.Scope `json:"scope,omitempty"`
	Expires  time.Time  `json:"expires,omitzero"`
}

type tokenCreated struct {
	Token string    `json:"token"`
	Info  TokenInfo `json:"info"`
}

type loginLink struct {
	URL string `json:"url"`
}

type authRequest struct {
	User      string `json:"user"`
	Extension string `json:"ext"`
	Name      string `json:"name"`
}
