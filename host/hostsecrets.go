package host

import (
	"context"
	"errors"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/secrets"
)

// hostSecretExtension keys the host's own secrets of a user in the
// secrets backend (the OpenID provider's refresh token): no extension can
// have this name, so none can read them.
const hostSecretExtension = "@host"

// HostSecret reads the host's own secret name of user; a missing one is
// an error matching ext.ErrNotFound.
func (h *Host) HostSecret(ctx context.Context, user, name string) (string, error) {
	if err := checkUser(user); err != nil {
		return "", err
	}
	v, err := h.secrets.Get(ctx, secrets.Key{Extension: hostSecretExtension, User: user, Name: name})
	if err != nil {
		return "", mapSecretErr(err)
	}
	return v.Reveal(), nil
}

// SetHostSecret stores the host's own secret name of user.
func (h *Host) SetHostSecret(ctx context.Context, user, name, value string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	return mapSecretErr(h.secrets.Set(ctx, secrets.Key{Extension: hostSecretExtension, User: user, Name: name}, secrets.NewValue(value)))
}

// DeleteHostSecret removes the host's own secret name of user (none is
// not an error).
func (h *Host) DeleteHostSecret(ctx context.Context, user, name string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	err := mapSecretErr(h.secrets.Delete(ctx, secrets.Key{Extension: hostSecretExtension, User: user, Name: name}))
	if errors.Is(err, ext.ErrNotFound) {
		return nil
	}
	return err
}
