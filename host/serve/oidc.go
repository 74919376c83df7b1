package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/oidclogin"
	"github.com/agenthost/agenthost/host/internal/web"
)

// openOIDC returns the sign-in with the operator's OpenID Connect
// provider, nil without one. It contacts nobody: the provider is
// discovered at the first sign-in.
func (s *Server) openOIDC(h *host.Host, logger *slog.Logger) (*oidclogin.Login, error) {
	if !s.cfg.OIDC.On() {
		return nil, nil
	}
	c := s.cfg.OIDC.WithDefaults(s.cfg.Extensions)
	return oidclogin.New(oidclogin.Config{
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
		Users:     oidcUsers{a: s.auth, log: logger},
		Logger:    logger,
	})
}

// oidcUsers records the provider's people in the users table.
type oidcUsers struct {
	a   *auth.Store
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
	}
	return err
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
