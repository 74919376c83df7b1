package control

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// Handler is the control API over h.
func Handler(h api.Host, tokens Tokens) http.Handler {
	mux := http.NewServeMux()
	decode := func(r *http.Request, v any) error {
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(v); err != nil {
			return fmt.Errorf("decoding the request: %v: %w", err, ext.ErrInvalidArgument)
		}
		return nil
	}
	q := func(r *http.Request, k string) string { return r.URL.Query().Get(k) }
	mux.HandleFunc("GET /v1/tools", func(w http.ResponseWriter, r *http.Request) {
		tools, err := h.Tools(r.Context(), q(r, "user"))
		if err != nil {
			writeError(w, err)
			return
		}
		out := make([]wireTool, len(tools))
		for i, t := range tools {
			out[i] = toWireTool(t)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /v1/call", func(w http.ResponseWriter, r *http.Request) {
		var req callRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		res, err := h.Call(r.Context(), req.User, req.Conversation, req.Name, req.Arguments)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, callResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError})
	})
	mux.HandleFunc("GET /v1/sections", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Sections())
	})
	mux.HandleFunc("GET /v1/settings", func(w http.ResponseWriter, r *http.Request) {
		v, err := h.GetSettings(r.Context(), q(r, "user"), q(r, "ext"), q(r, "section"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	mux.HandleFunc("PUT /v1/settings", func(w http.ResponseWriter, r *http.Request) {
		var req settingsRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := h.SetSettings(r.Context(), req.User, req.Extension, req.Section, req.Values); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	})
	mux.HandleFunc("PUT /v1/secret", func(w http.ResponseWriter, r *http.Request) {
		var req secretRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := h.SetSecret(r.Context(), req.User, req.Extension, req.Name, req.Value); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	})
	mux.HandleFunc("DELETE /v1/secret", func(w http.ResponseWriter, r *http.Request) {
		if err := h.DeleteSecret(r.Context(), q(r, "user"), q(r, "ext"), q(r, "name")); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := h.Status(r.Context(), q(r, "user"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Overview())
	})
	mux.HandleFunc("GET /v1/extensions", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Extensions())
	})
	noTokens := func(w http.ResponseWriter) bool {
		if tokens == nil {
			writeError(w, fmt.Errorf("this host issues no tokens: %w", ext.ErrUnimplemented))
			return true
		}
		return false
	}
	mux.HandleFunc("POST /v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		if noTokens(w) {
			return
		}
		var req tokenRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		plain, info, err := tokens.CreateToken(r.Context(), req.User, req.Name, req.Operator)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, tokenCreated{Token: plain, Info: info})
	})
	mux.HandleFunc("GET /v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		if noTokens(w) {
			return
		}
		list, err := tokens.ListTokens(r.Context(), q(r, "user"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("DELETE /v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		if noTokens(w) {
			return
		}
		if err := tokens.RevokeToken(r.Context(), q(r, "id")); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	})
	mux.HandleFunc("POST /v1/login-links", func(w http.ResponseWriter, r *http.Request) {
		if noTokens(w) {
			return
		}
		var req tokenRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		url, err := tokens.CreateLoginLink(r.Context(), req.User)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, loginLink{URL: url})
	})
	return mux
}

type wireTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	Extension    string          `json:"extension"`
	Exposure     ext.Exposure    `json:"exposure"`
	Replay       ext.Replay      `json:"replay"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
}

func toWireTool(t api.Tool) wireTool {
	return wireTool{Name: t.Name, Title: t.Title, Description: t.Description, Extension: t.Extension,
		Exposure: t.Exposure, Replay: t.Replay, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations}
}

func fromWireTool(t wireTool) api.Tool {
	return api.Tool{Extension: t.Extension, Tool: ext.Tool{Name: t.Name, Title: t.Title, Description: t.Description,
		Exposure: t.Exposure, Replay: t.Replay, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations}}
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
	User     string `json:"user,omitempty"`
	Name     string `json:"name,omitempty"`
	Operator bool   `json:"operator,omitempty"`
}

type tokenCreated struct {
	Token string    `json:"token"`
	Info  TokenInfo `json:"info"`
}

type loginLink struct {
	URL string `json:"url"`
}
