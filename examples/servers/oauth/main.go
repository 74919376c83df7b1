// Command oauth is an example remote MCP server protected by OAuth 2.1, with
// its own small authorization server: RFC 9728 protected resource
// metadata, RFC 8414 authorization server metadata, dynamic client
// registration, authorization with PKCE S256 (an account-name form stands
// for the provider's login), the RFC 9207 iss parameter, RFC 8707
// resource indicators, refresh-token rotation with reuse detection and
// revocation. Its whoami tool says which account a request's token belongs
// to. It is the authorization server of agenthost's OAuth tests; state is in
// memory.
//
//	oauth [-addr 127.0.0.1:8091] [-access-ttl 1h] [-scopes mcp] [-cimd] [-open-initialize [-open-list]] [-admin] [-token-endpoint URL]
//	      [-legacy | -no-resource-metadata] [-client-credentials ID [-client-secret-env VAR] [-client-jwt-key FILE]]
//
// With -legacy it follows the 2025-03-26 authorization rules: it
// publishes no metadata (neither RFC 9728 nor RFC 8414), its 401 names
// none, its endpoints are /authorize, /token and /register at its root,
// and its redirects carry no iss. With -no-resource-metadata it
// publishes its RFC 8414 metadata but no RFC 9728 metadata (its 401 names
// none): the 2025-03-26 discovery, at the MCP server's origin.
//
// With -client-credentials ID, client ID may use the client credentials
// grant (a machine's token, account "client:ID", no refresh token),
// authenticated with the secret in environment variable VAR
// (client_secret_basic or client_secret_post) or with a client assertion
// (private_key_jwt, RFC 7523) signed by the private half of the public key
// in PEM file FILE (RSA, ECDSA or Ed25519): iss and sub the client, aud
// the issuer or the token endpoint, an expiry, a jti used once.
//
// With -open-initialize, a request without a token that opens or ends a
// session (initialize, a notification, DELETE) is let through, and the
// token is asked for from tools/list on; with -open-list too, tools/list
// passes as well and the token is asked for from tools/call on. With
// -token-endpoint (tests only) its metadata names that URL as the token
// endpoint, as a hostile server would.
//
// The MCP endpoint is /mcp. With -admin (tests only), GET /admin/stats
// counts registrations, authorizations, code exchanges, refreshes (and
// those without the resource parameter), refresh-token reuses,
// revocations, refused MCP requests and the MCP sessions open; GET
// /admin/seen lists the account of every accepted MCP request; POST
// /admin/revoke?login=A revokes every grant of account A; POST
// /admin/fail-tokens?n=N makes the next N token requests answer 503; GET
// /admin/tokens lists every token issued, by account. It prints its
// URL on stderr once listening.
package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8091", "address to listen on")
	ttl := flag.Duration("access-ttl", time.Hour, "lifetime of access tokens")
	scopes := flag.String("scopes", "mcp", "comma-separated scopes the MCP endpoint requires")
	cimd := flag.Bool("cimd", false, "accept client ID metadata documents (https client IDs)")
	admin := flag.Bool("admin", false, "serve /admin/ (tests only)")
	openInit := flag.Bool("open-initialize", false, "let initialize, notifications and DELETE through without a token (ask for one from tools/list on)")
	openList := flag.Bool("open-list", false, "with -open-initialize, let tools/list through without a token too (ask for one from tools/call on)")
	tokenEndpoint := flag.String("token-endpoint", "", "the token endpoint the metadata names instead of its own (tests only)")
	legacy := flag.Bool("legacy", false, "follow the 2025-03-26 authorization rules: no metadata, endpoints at the root")
	noPRM := flag.Bool("no-resource-metadata", false, "publish no protected resource metadata (RFC 9728), as 2025-03-26 servers")
	ccClient := flag.String("client-credentials", "", "a client ID that may use the client credentials grant")
	ccSecretEnv := flag.String("client-secret-env", "", "the environment variable that holds -client-credentials's secret")
	ccKeyFile := flag.String("client-jwt-key", "", "a PEM file with the public key of -client-credentials's assertions (private_key_jwt)")
	flag.Parse()
	o := options{accessTTL: *ttl, cimd: *cimd, admin: *admin, openInitialize: *openInit, openList: *openList, tokenEndpoint: *tokenEndpoint,
		legacy: *legacy, noResourceMetadata: *noPRM, ccClient: *ccClient}
	if *ccSecretEnv != "" {
		o.ccSecret = os.Getenv(*ccSecretEnv)
	}
	if *ccKeyFile != "" {
		k, err := readPublicKey(*ccKeyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "oauth:", err)
			os.Exit(2)
		}
		o.ccKey = k
	}
	if o.ccClient == "" && (o.ccSecret != "" || o.ccKey != nil) {
		fmt.Fprintln(os.Stderr, "oauth: -client-secret-env and -client-jwt-key need -client-credentials")
		os.Exit(2)
	}
	for _, s := range strings.Split(*scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.scopes = append(o.scopes, s)
		}
	}
	if err := run(*addr, o); err != nil {
		fmt.Fprintln(os.Stderr, "oauth:", err)
		os.Exit(1)
	}
}

// readPublicKey reads a PEM public key (PKIX: RSA, ECDSA or Ed25519).
func readPublicKey(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// newMux returns the authorization server and the protected MCP endpoint
// at base.
func newMux(base string, o options) http.Handler {
	a := newAuthServer(base, o)
	mux := http.NewServeMux()
	a.routes(mux)
	routes(mux, a)
	return mux
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully.
func run(addr string, o options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	srv := &http.Server{Handler: newMux(base, o), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "oauth: serving %s/mcp\n", base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
