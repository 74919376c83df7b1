// Package serve serves an embedded [host.Host] to people and agents, as
// `agenthost serve` does: the MCP endpoint at /mcp (each user's own tools
// over MCP Streamable HTTP, bearer tokens), the settings web UI at
// /settings, its JSON API at /api/v1/, the operator's status page at
// /status and /status.json, /healthz, the OAuth redirect URI and client
// metadata document of extensions' sign-ins at /oauth/callback and
// /oauth/client-metadata.json ([Server.BeginAuth]), and, when asked, the control socket
// through which the agenthost CLI reaches the host.
//
// Unless the host's config switches it off (oauth.enabled), the server is
// also an OAuth 2.1 authorization server for /mcp (its metadata under
// /.well-known/, /oauth/authorize, /oauth/token, /oauth/register,
// /oauth/revoke; grants in oauth.db in the data folder): apps such as
// Claude's custom connectors connect with the URL alone, and their user
// signs in and consents on the settings UI. /mcp takes both the host's
// tokens and those apps' access tokens; revoking a grant (Connected apps
// on the settings page) closes its MCP sessions at once.
//
// # Serving a host
//
// Start the host, hand it to [New], and serve until the context ends:
//
//	h, err := host.New(ctx, cfg, &host.Options{Logger: logger})
//	if err != nil { ... }
//	defer h.Close()
//	s, err := serve.New(h, &serve.Options{Logger: logger})
//	if err != nil { ... }
//	tok, err := s.CreateToken(ctx, "alice", "laptop") // alice's bearer token for /mcp
//	err = s.ListenAndServe(ctx)                       // on the config's listen address
//
// An agent then connects to s.URL()+"/mcp" with "Authorization: Bearer
// "+tok and sees alice's tools. The address, TLS, public URL and allowed
// browser origins come from the host's [host.Config] (the operator's
// file); [Options.Addr] overrides the address. Tokens are stored hashed in
// the host's data folder (auth.db), beside its settings.
//
// A public URL with a path (https://example.com/agenthost, behind a
// reverse proxy) puts every surface under that path: the URLs the host
// gives (the MCP URL, links, the OAuth metadata's issuer, resource and
// endpoints) name it, and the host answers both with the path (a proxy
// that passes it on) and without (one that strips it); the OAuth metadata
// answer at RFC 8414's and RFC 9728's root locations too
// (/.well-known/oauth-authorization-server/agenthost).
//
// To mount the surfaces in a server of your own, use [Server.Handler]
// instead of listening, and [Server.Close] when done:
//
//	mux.Handle("/", s.Handler())
//
// # Lifecycle and concurrency
//
// New opens the token store (and the OAuth store) and, with
// [Options.ControlSocket], starts the
// control socket; it listens on nothing else. [Server.Serve] and
// [Server.ListenAndServe] block until their context ends or Close is
// called, and then close the server. Close stops the HTTP server (letting
// requests in flight finish for up to 5 s), ends the open MCP sessions,
// stops the control socket and closes the stores; it is idempotent
// and waits for everything the server started. Close the server before
// the host. All methods are safe for concurrent use.
package serve
