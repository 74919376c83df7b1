package oauthserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/ory/fosite"

	"github.com/agenthost/agenthost/host/internal/guard"
)

// Paths of the server's routes. /oauth/callback and
// /oauth/client-metadata.json are not the server's: they belong to the
// host's OAuth client (ext-mcp's outbound connections).
const (
	PathResourceMetadata    = "/.well-known/oauth-protected-resource"
	PathResourceMetadataMCP = "/.well-known/oauth-protected-resource/mcp"
	PathAuthServerMetadata  = "/.well-known/oauth-authorization-server"
	// PathOpenIDConfiguration answers, under a public URL with a path
	// only, with the authorization server's metadata: the MCP spec's last
	// discovery location for an issuer with a path (OpenID Connect's
	// "path appending", <publicURL>/.well-known/openid-configuration),
	// the only one a proxy that forwards just that path passes on. The
	// document is RFC 8414's: this server issues no ID tokens.
	PathOpenIDConfiguration  = "/.well-known/openid-configuration"
	PathAuthorize            = "/oauth/authorize"
	PathToken                = "/oauth/token"
	PathRegister             = "/oauth/register"
	PathRevoke               = "/oauth/revoke"
	maxFormBytes             = 64 << 10
	maxRegistrationBodyBytes = 16 << 10
)

// Mount registers every route of the server on mux: the metadata of the
// protected resource (RFC 9728) and of the authorization server (RFC
// 8414), and the authorize, token, registration (RFC 7591) and revocation
// (RFC 7009) endpoints.
//
// The routes are the host's, without the path of the public URL, which
// the host strips when a proxy passes it on. Under a public URL with a
// path (https://example.com/agenthost) the metadata are also where RFC
// 8414 and RFC 9728 put them, the path after the well-known part:
// /.well-known/oauth-authorization-server/agenthost and
// /.well-known/oauth-protected-resource/agenthost/mcp (a proxy that
// forwards them, unchanged, reaches them).
func (s *Server) Mount(mux *http.ServeMux) {
	mux.Handle(PathResourceMetadata, s.checkHost(http.HandlerFunc(s.resourceMetadata)))
	mux.Handle(PathResourceMetadata+"/", s.checkHost(s.at(func() []string { return []string{"/mcp", s.basePath() + "/mcp"} }, http.HandlerFunc(s.resourceMetadata))))
	mux.Handle(PathAuthServerMetadata, s.checkHost(cors(http.HandlerFunc(s.serverMetadata))))
	mux.Handle(PathAuthServerMetadata+"/", s.checkHost(cors(s.at(func() []string { return []string{s.basePath()} }, http.HandlerFunc(s.serverMetadata)))))
	mux.Handle(PathOpenIDConfiguration, s.checkHost(cors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.basePath() == "" {
			http.NotFound(w, r)
			return
		}
		s.serverMetadata(w, r)
	}))))
	mux.Handle(PathAuthorize, s.checkHost(http.HandlerFunc(s.authorize)))
	mux.Handle(PathToken, s.checkHost(cors(http.HandlerFunc(s.token))))
	mux.Handle(PathRegister, s.checkHost(cors(http.HandlerFunc(s.register))))
	mux.Handle(PathRevoke, s.checkHost(cors(http.HandlerFunc(s.revoke))))
}

// checkHost refuses (403) a request that reached a loopback address naming
// another host than a loopback one or [Options.AllowedHosts], as every
// surface of the host does (DNS rebinding).
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !guard.HostAllowed(r, s.opts.AllowedHosts) {
			s.opts.Refusals.Refused(s.log, "oauth: refused a foreign Host", "host", r.Host, "addr", s.opts.AddrKey(r))
			http.Error(w, "forbidden: invalid Host header", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), addrCtxKey{}, s.opts.AddrKey(r))))
	})
}

// at serves a metadata document at the well-known paths whose rest (the
// path after the well-known part, RFC 8414 §3.1, RFC 9728 §3.1) is one
// of rests(); another is not found. An empty rest is no match.
func (s *Server) at(rests func() []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		_, rest, _ = strings.Cut(rest, "/")
		if rest == "" || !slices.Contains(rests(), "/"+rest) {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cors lets browser-based clients call an endpoint that uses no cookies:
// any origin, no credentials.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// resourceMetadata serves the MCP endpoint's protected resource metadata
// with go-sdk's handler.
func (s *Server) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               s.Resource(),
		AuthorizationServers:   []string{s.issuer()},
		ScopesSupported:        []string{ScopeMCP},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "agenthost",
	}).ServeHTTP(w, r)
}

// serverMetadata is the authorization server's metadata (RFC 8414). It
// is written here rather than with oauthex.AuthServerMeta, which would
// send an empty jwks_uri: this server signs nothing.
type serverMetadata struct {
	Issuer                                     string   `json:"issuer"`
	AuthorizationEndpoint                      string   `json:"authorization_endpoint"`
	TokenEndpoint                              string   `json:"token_endpoint"`
	RegistrationEndpoint                       string   `json:"registration_endpoint"`
	RevocationEndpoint                         string   `json:"revocation_endpoint"`
	ScopesSupported                            []string `json:"scopes_supported"`
	ResponseTypesSupported                     []string `json:"response_types_supported"`
	ResponseModesSupported                     []string `json:"response_modes_supported"`
	GrantTypesSupported                        []string `json:"grant_types_supported"`
	TokenEndpointAuthMethodsSupported          []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethodsSupported     []string `json:"revocation_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocumentSupported          bool     `json:"client_id_metadata_document_supported"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported"`
}

func (s *Server) serverMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	iss := s.issuer()
	writeJSON(w, http.StatusOK, serverMetadata{
		Issuer:                                     iss,
		AuthorizationEndpoint:                      iss + PathAuthorize,
		TokenEndpoint:                              iss + PathToken,
		RegistrationEndpoint:                       iss + PathRegister,
		RevocationEndpoint:                         iss + PathRevoke,
		ScopesSupported:                            []string{ScopeMCP, ScopeOfflineAccess},
		ResponseTypesSupported:                     []string{"code"},
		ResponseModesSupported:                     []string{"query"},
		GrantTypesSupported:                        []string{"authorization_code", "refresh_token"},
		TokenEndpointAuthMethodsSupported:          []string{"none"},
		RevocationEndpointAuthMethodsSupported:     []string{"none"},
		CodeChallengeMethodsSupported:              []string{"S256"},
		ClientIDMetadataDocumentSupported:          true,
		AuthorizationResponseIssParameterSupported: true,
	})
}

// token is the token endpoint: authorization_code (PKCE S256 required)
// and refresh_token (rotated; a reused one revokes its grant).
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.provider.WriteAccessError(ctx, w, fosite.NewAccessRequest(nil), fosite.ErrInvalidRequest.WithHint("The form could not be read."))
		return
	}
	// RFC 8707: a resource on the token request must be this one (the
	// token's audience comes from the grant).
	if res := r.PostForm["resource"]; len(res) > 1 || (len(res) == 1 && res[0] != s.Resource()) {
		s.logRefused(r, "token", errInvalidTarget)
		s.provider.WriteAccessError(ctx, w, fosite.NewAccessRequest(nil), s.invalidTarget())
		return
	}
	if r.PostForm.Get("grant_type") == "refresh_token" {
		// fosite takes a revoked refresh token for a reused one ("already
		// used"); its app must be told to sign in again.
		sig := s.strategy.RefreshTokenSignature(ctx, r.PostForm.Get("refresh_token"))
		if _, err := s.store.GetRefreshTokenSession(ctx, sig, &fosite.DefaultSession{}); errors.Is(err, ErrRevoked) {
			err := fosite.ErrInvalidGrant.WithHint("The grant was revoked: sign in again.")
			s.logRefused(r, "token", err)
			s.provider.WriteAccessError(ctx, w, fosite.NewAccessRequest(nil), err)
			return
		}
	}
	sess := &fosite.DefaultSession{}
	ar, err := s.provider.NewAccessRequest(ctx, r, sess)
	if err != nil {
		s.logRefused(r, "token", err)
		var fe *fetchError
		if rfc := fosite.ErrorToRFC6749Error(err); rfc.ErrorField == fosite.ErrInvalidClient.ErrorField && errors.As(err, &fe) {
			// fosite hides why; a document's trouble (the limits, its host)
			// is the client's to know, as on the authorization page.
			err = rfc.WithDescription("The client_id is not usable here: " + fe.public())
		}
		s.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	resp, err := s.provider.NewAccessResponse(ctx, ar)
	if err != nil {
		s.logRefused(r, "token", err)
		s.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	s.touch(ctx, ar.GetID())
	s.log.Info("oauth: tokens issued", "grant", ar.GetID(), "client", clip(ar.GetClient().GetID()),
		"grant_type", r.PostForm.Get("grant_type"))
	s.provider.WriteAccessResponse(ctx, w, ar, resp)
}

// revoke is the revocation endpoint (RFC 7009): revoking either token of
// a grant revokes the whole grant.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	err := s.provider.NewRevocationRequest(ctx, r)
	if err != nil {
		s.logRefused(r, "revoke", err)
	}
	s.provider.WriteRevocationResponse(ctx, w, err)
}

// register is dynamic client registration (RFC 7591) of public clients.
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, regError{"invalid_request", "POST the client's metadata as JSON"})
		return
	}
	// Per client address first, so that one client cannot use up the
	// overall budget for everyone; then the overall one.
	now, addr := s.now(), s.opts.AddrKey(r)
	if !s.addrRegisters.has(addr, now) || !s.registers.AllowN(now, 1) {
		s.opts.Refusals.Refused(s.log, "oauth: too many registrations", "addr", addr)
		w.Header().Set("Retry-After", "10")
		writeJSON(w, http.StatusTooManyRequests, regError{"temporarily_unavailable", "too many registrations; try again shortly"})
		return
	}
	s.addrRegisters.take(addr, now)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRegistrationBodyBytes))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, regError{"invalid_client_metadata", "the metadata is larger than 16 KiB"})
		return
	}
	var m clientMetadata
	if err := json.Unmarshal(body, &m); err != nil {
		writeJSON(w, http.StatusBadRequest, regError{"invalid_client_metadata", "the body is not a JSON object of client metadata: " + err.Error()})
		return
	}
	c, err := s.policy.toClient(&m, false)
	if err != nil {
		code, desc := errorCode(err)
		s.opts.Refusals.Refused(s.log, "oauth: registration refused", "addr", s.opts.AddrKey(r), "reason", desc)
		writeJSON(w, http.StatusBadRequest, regError{code, desc})
		return
	}
	c.ID, c.Created = newClientID(), s.now().Truncate(time.Second)
	if err := s.store.SaveClient(r.Context(), c); err != nil {
		s.log.Error("oauth: storing a registration", "err", err)
		writeJSON(w, http.StatusInternalServerError, regError{"server_error", "the registration could not be stored"})
		return
	}
	s.log.Info("oauth: client registered", "client", c.ID, "name", clip(c.Name), "redirect_uris", c.RedirectURIs)
	writeJSON(w, http.StatusCreated, &oauthex.ClientRegistrationResponse{
		ClientID: c.ID, ClientIDIssuedAt: c.Created,
		ClientRegistrationMetadata: oauthex.ClientRegistrationMetadata{
			RedirectURIs: c.RedirectURIs, TokenEndpointAuthMethod: "none", GrantTypes: c.GrantTypes,
			ResponseTypes: []string{"code"}, ClientName: c.Name, ClientURI: c.URI,
		},
	})
}

// regError is an RFC 7591 error body.
type regError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// errInvalidTarget marks a resource that is not this server's (RFC 8707).
var errInvalidTarget = errors.New("invalid_target")

func (s *Server) invalidTarget() *fosite.RFC6749Error {
	return &fosite.RFC6749Error{
		ErrorField:       "invalid_target",
		DescriptionField: "The requested resource is not served here: the only resource is " + s.Resource() + ".",
		CodeField:        http.StatusBadRequest,
	}
}

// logRefused logs a refused OAuth request by its error code and hint,
// never its parameters (codes and tokens).
func (s *Server) logRefused(r *http.Request, endpoint string, err error) {
	code, hint := "invalid_target", ""
	if !errors.Is(err, errInvalidTarget) {
		e := fosite.ErrorToRFC6749Error(err)
		if e.CodeField >= 500 {
			s.log.Error("oauth: request failed", "endpoint", endpoint, "error", e.ErrorField, "hint", e.HintField, "debug", e.DebugField)
			return
		}
		code, hint = e.ErrorField, e.HintField
	}
	s.opts.Refusals.Refused(s.log, "oauth: request refused", "endpoint", endpoint, "error", code,
		"hint", hint, "client", clip(r.Form.Get("client_id")), "addr", s.opts.AddrKey(r))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"server_error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
