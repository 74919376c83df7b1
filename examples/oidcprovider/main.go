// Command oidcprovider is a small OpenID Connect provider for tests and
// demos, built from zitadel/oidc's OpenID Provider package
// (github.com/zitadel/oidc/v3/pkg/op) and the in-memory storage and login
// form of its example server (example/server/storage, exampleop): a real,
// well-kept implementation of discovery, the authorization code flow with
// PKCE, ID tokens and the JWKS, not a stub of ours. zitadel/oidc over Dex:
// it is one Go module on the proxy that builds in seconds, and its storage
// is Go, so that groups, email_verified and key rotation are a few lines
// here rather than a connector's configuration.
//
// What this program adds to the example: its users come from a JSON file
// (-users: [{"id","username","password","email","emailVerified",
// "groups"}]), with their groups in the ID token's "groups" claim; one web
// client (-client-id, the secret from $OIDCPROVIDER_CLIENT_SECRET, the
// redirect URIs from -redirect) whose ID tokens carry the email and
// profile claims (as Google's and Keycloak's do; with -strict-claims they
// are at the userinfo endpoint only, as OIDC Core 5.4 has it); and the signing key
// rotated on SIGHUP or, with -admin, on POST /admin/rotate-keys: a new key
// signs from then on, the JWKS lists it first and keeps the old one. With
// -admin, POST /admin/groups?username=U&group=G&group=H replaces a user's
// groups (a person leaving a group at the provider), and POST
// /admin/terminate?username=U ends the user's tokens, refresh tokens
// included (a person removed at the provider).
//
// It prints "serving <issuer>" on stderr once it listens. Passwords are
// compared in clear: for tests only.
//
// # Concurrency
//
// main owns the HTTP server and the signal goroutine and waits for both
// on SIGINT/SIGTERM; the key list is guarded by a mutex, the example
// storage guards its own maps.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type redirects []string

func (r *redirects) String() string     { return strings.Join(*r, ",") }
func (r *redirects) Set(v string) error { *r = append(*r, v); return nil }

// fileUser is one user of the -users file.
type fileUser struct {
	ID            string   `json:"id"`
	Username      string   `json:"username"`
	Password      string   `json:"password"`
	Email         string   `json:"email"`
	EmailVerified bool     `json:"emailVerified"`
	FirstName     string   `json:"firstName"`
	LastName      string   `json:"lastName"`
	Groups        []string `json:"groups"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "oidcprovider:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	usersFile := flag.String("users", "", "the users, a JSON file (required)")
	clientID := flag.String("client-id", "agenthost", "the web client's ID")
	admin := flag.Bool("admin", false, "serve POST /admin/rotate-keys, /admin/groups and /admin/terminate")
	strict := flag.Bool("strict-claims", false, "keep the email and profile claims out of ID tokens (OIDC Core 5.4: at the userinfo endpoint only)")
	var redirectURIs redirects
	flag.Var(&redirectURIs, "redirect", "a redirect URI of the client (repeatable)")
	flag.Parse()
	secret := os.Getenv("OIDCPROVIDER_CLIENT_SECRET")
	if *usersFile == "" || secret == "" || len(redirectURIs) == 0 {
		return errors.New("-users, -redirect and $OIDCPROVIDER_CLIENT_SECRET are required")
	}
	users, err := readUsers(*usersFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	issuer := "http://" + ln.Addr().String()

	storage.RegisterClients(storage.WebClient(*clientID, secret, redirectURIs...))
	st := &store{Storage: storage.NewStorage(users), users: users, strict: *strict}
	if err := st.rotate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	router := exampleop.SetupServer(issuer, st, logger, false)
	mux := http.NewServeMux()
	if *admin {
		mux.HandleFunc("POST /admin/rotate-keys", func(w http.ResponseWriter, r *http.Request) {
			if err := st.rotate(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, st.current())
		})
		mux.HandleFunc("POST /admin/groups", func(w http.ResponseWriter, r *http.Request) {
			u := users.GetUserByUsername(r.FormValue("username"))
			if u == nil {
				http.Error(w, "no such user", http.StatusNotFound)
				return
			}
			users.setGroups(u.ID, r.Form["group"])
		})
		mux.HandleFunc("POST /admin/terminate", func(w http.ResponseWriter, r *http.Request) {
			u := users.GetUserByUsername(r.FormValue("username"))
			if u == nil {
				http.Error(w, "no such user", http.StatusNotFound)
				return
			}
			_ = st.TerminateSession(r.Context(), u.ID, *clientID)
		})
	}
	mux.Handle("/", router)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := st.rotate(); err != nil {
					logger.Error("rotating the signing key", "err", err)
				}
			}
		}
	})
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Serve(ln) })
	fmt.Fprintln(os.Stderr, "serving", issuer)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stop()
	signal.Stop(hup)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func readUsers(path string) (*userStore, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list []fileUser
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	us := &userStore{byID: map[string]*storage.User{}, groups: map[string][]string{}}
	for _, u := range list {
		if u.ID == "" || u.Username == "" {
			return nil, fmt.Errorf("%s: a user without id or username", path)
		}
		us.byID[u.ID] = &storage.User{ID: u.ID, Username: u.Username, Password: u.Password, Email: u.Email,
			EmailVerified: u.EmailVerified, FirstName: u.FirstName, LastName: u.LastName}
		us.groups[u.ID] = u.Groups
	}
	return us, nil
}

// userStore is the example storage's UserStore over the -users file.
// The groups change (POST /admin/groups), under mu.
type userStore struct {
	byID map[string]*storage.User

	mu     sync.Mutex
	groups map[string][]string
}

func (u *userStore) groupsOf(id string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.groups[id]
}

func (u *userStore) setGroups(id string, g []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.groups[id] = g
}

func (u *userStore) GetUserByID(id string) *storage.User { return u.byID[id] }
func (u *userStore) GetUserByUsername(name string) *storage.User {
	for _, x := range u.byID {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (u *userStore) ExampleClientID() string { return "" }

// store is the example storage with rotating signing keys, the groups
// claim, and ID tokens that carry the email and profile claims.
type store struct {
	*storage.Storage
	users  *userStore
	strict bool // no userinfo claims in ID tokens

	mu   sync.Mutex
	keys []*key // newest first
}

type key struct {
	id  string
	key *rsa.PrivateKey
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *key) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *key) Key() any                                    { return k.key }
func (k *key) ID() string                                  { return k.id }
func (k *key) Use() string                                 { return "sig" }

type publicKey struct{ *key }

func (k publicKey) Key() any { return &k.key.key.PublicKey }

// rotate makes a new signing key; the old ones stay in the JWKS.
func (s *store) rotate() error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append([]*key{{id: fmt.Sprintf("key-%d-%d", len(s.keys)+1, time.Now().UnixNano()), key: k}}, s.keys...)
	return nil
}

func (s *store) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[0].id
}

func (s *store) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[0], nil
}

func (s *store) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *store) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, publicKey{k})
	}
	return out, nil
}

// GetClientByClientID returns the client, asserting the userinfo claims
// (email, profile) in its ID tokens.
func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil || s.strict {
		return c, err
	}
	return assertingClient{c}, nil
}

type assertingClient struct{ op.Client }

func (assertingClient) IDTokenUserinfoClaimsAssertion() bool { return true }

// SetUserinfoFromScopes adds the user's groups to the example's claims.
func (s *store) SetUserinfoFromScopes(ctx context.Context, ui *oidc.UserInfo, userID, clientID string, scopes []string) error {
	if err := s.Storage.SetUserinfoFromScopes(ctx, ui, userID, clientID, scopes); err != nil {
		return err
	}
	if g := s.users.groupsOf(userID); len(g) > 0 {
		ui.AppendClaims("groups", g)
	}
	return nil
}
