package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/oidclogin"
	"github.com/agenthost/agenthost/host/internal/web"
)

// refreshSecret names the provider's refresh token of a user among the
// host's own secrets (host.SetHostSecret: in the secrets backend, under
// a name no extension can have).
const refreshSecret = "oidc-refresh-token"

// openOIDC returns the sign-in with the operator's OpenID Connect
// provider and its re-checks, nil without one. It contacts nobody: the
// provider is discovered at the first sign-in.
func (s *Server) openOIDC(h *host.Host, logger *slog.Logger) (*oidclogin.Login, *oidcRechecker, error) {
	if !s.cfg.OIDC.On() {
		return nil, nil, nil
	}
	c := s.cfg.OIDC.WithDefaults(s.cfg.Extensions)
	rc := &oidcRechecker{a: s.auth, h: h, log: logger, issuer: c.Issuer,
		every: time.Duration(c.RecheckMinutes * float64(time.Minute)), users: map[string]*recheckState{}}
	l, err := oidclogin.New(oidclogin.Config{
		Name: c.Name, Issuer: c.Issuer, ClientID: c.ClientID,
		ClientSecret: func(ctx context.Context) (string, error) {
			v, err := h.OperatorSecret(ctx, c.ClientSecretExtension, c.ClientSecret)
			if err != nil {
				return "", fmt.Errorf("the operator secret %q of extension %s (agenthost secret set --operator --ext %s %s): %w",
					c.ClientSecret, c.ClientSecretExtension, c.ClientSecretExtension, c.ClientSecret, err)
			}
			return v, nil
		},
		RedirectURL: func() string { return s.URL() + web.OIDCCallbackPath },
		UserClaim:   c.UserClaim, GroupsClaim: c.GroupsClaim, Scopes: c.Scopes,
		AllowedDomains: c.AllowedDomains, AllowedGroups: c.AllowedGroups, AllowedUsers: c.AllowedUsers,
		ValidUser: host.ValidUser,
		Users:     oidcUsers{a: s.auth, h: h, rc: rc, log: logger},
		Logger:    logger,
	})
	if err != nil {
		return nil, nil, err
	}
	rc.login = l
	// A disabled or deleted user's refresh token is of no more use: it
	// goes (a re-enabled user's next sign-in brings a new one).
	s.stopOIDC = s.auth.OnUserChange(func(ev auth.UserEvent) {
		if ev.Change != auth.UserDisabled && ev.Change != auth.UserDeleted {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.DeleteHostSecret(ctx, ev.User, refreshSecret); err != nil {
			logger.Error("deleting the provider's refresh token of a user", "user", ev.User, "err", err)
		}
	})
	return l, rc, nil
}

// oidcUsers records the provider's people in the users table.
type oidcUsers struct {
	a   *auth.Store
	h   *host.Host
	rc  *oidcRechecker
	log *slog.Logger
}

// Admitted creates or updates the user, with the provider's groups (those
// a group name cannot be are left out, and logged).
func (u oidcUsers) Admitted(ctx context.Context, id oidclogin.Identity) error {
	groups := []string{}
	for _, g := range id.Groups {
		if err := auth.CheckGroup(g); err != nil {
			u.log.Warn("oidc: leaving out a group the provider named", "user", id.User, "err", err)
			continue
		}
		groups = append(groups, g)
	}
	_, err := u.a.UpsertUser(ctx, id.User, auth.UserInfo{Source: auth.SourceOIDC, Email: id.Email, Issuer: id.Issuer, Subject: id.Subject, Groups: groups})
	switch {
	case errors.Is(err, auth.ErrUserDisabled):
		return fmt.Errorf("%w: %w", oidclogin.ErrDisabled, err)
	case errors.Is(err, auth.ErrConflict):
		return &oidclogin.Refusal{User: id.User, Reason: "the user " + id.User + " here belongs to another account at the identity provider"}
	case err != nil:
		return err
	}
	if id.RefreshToken != "" {
		if err := u.h.SetHostSecret(ctx, id.User, refreshSecret, id.RefreshToken); err != nil {
			return fmt.Errorf("keeping the provider's refresh token of %s: %w", id.User, err)
		}
	}
	u.rc.checked(id.User)
	return nil
}

// NotAdmitted disables the user bound to this identity: the rule admitted
// them before (they signed in) and no longer does. A user the operator
// made, or bound to another identity, is left alone.
func (u oidcUsers) NotAdmitted(ctx context.Context, id oidclogin.Identity, reason string) error {
	usr, err := u.a.User(ctx, id.User)
	switch {
	case errors.Is(err, auth.ErrNotFound):
		return nil
	case err != nil:
		return err
	case usr.IsDisabled() || usr.Issuer != id.Issuer || usr.Subject != id.Subject:
		return nil
	}
	u.log.Warn("oidc: disabling a user the admission rule no longer admits", "user", id.User, "reason", reason)
	return u.a.DisableUser(ctx, id.User, auth.SourceOIDC)
}

// oidcRechecker asks the provider again about a user whose web session is
// in use, every RecheckMinutes, with the refresh token kept from their
// sign-in. A user's re-checks are serialized (providers rotate refresh
// tokens: two at once would spend one twice). It is safe for concurrent
// use and starts no goroutines.
type oidcRechecker struct {
	login  *oidclogin.Login
	a      *auth.Store
	h      *host.Host
	log    *slog.Logger
	issuer string
	every  time.Duration

	mu    sync.Mutex
	users map[string]*recheckState
}

type recheckState struct {
	run     sync.Mutex // held during a re-check
	checked time.Time  // under oidcRechecker.mu
}

func (rc *oidcRechecker) state(user string) *recheckState {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	st := rc.users[user]
	if st == nil {
		st = &recheckState{}
		rc.users[user] = st
	}
	return st
}

// checked records that user was vouched for now.
func (rc *oidcRechecker) checked(user string) {
	st := rc.state(user)
	rc.mu.Lock()
	st.checked = time.Now()
	rc.mu.Unlock()
}

func (rc *oidcRechecker) due(st *recheckState) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return time.Since(st.checked) >= rc.every
}

// Check re-checks user when it is due: nil when nothing is due, the user
// has no refresh token of this provider, or the provider still vouches;
// a *oidclogin.Refusal when the user was refused (and disabled). Another
// error (the provider unreachable) decides nothing; it is tried again
// after the interval.
func (rc *oidcRechecker) Check(ctx context.Context, user string) error {
	st := rc.state(user)
	if !rc.due(st) {
		return nil
	}
	st.run.Lock()
	defer st.run.Unlock()
	if !rc.due(st) { // another request re-checked meanwhile
		return nil
	}
	defer rc.checked(user)
	rt, err := rc.h.HostSecret(ctx, user, refreshSecret)
	if errors.Is(err, ext.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	usr, err := rc.a.User(ctx, user)
	switch {
	case errors.Is(err, auth.ErrNotFound):
		return nil
	case err != nil:
		return err
	case usr.Issuer != rc.issuer || usr.IsDisabled():
		return nil
	}
	return rc.login.Recheck(ctx, oidclogin.Identity{User: user, Issuer: usr.Issuer, Subject: usr.Subject, RefreshToken: rt})
}
