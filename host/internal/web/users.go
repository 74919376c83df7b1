package web

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
)

// UserHost is what the operator's user administration needs of the host
// (*host.Host is one).
type UserHost interface {
	// Status reports the servers of user, or of every user for "".
	Status(ctx context.Context, user string) ([]api.StatusEntry, error)
	// DeleteUserData removes user's settings and secrets and, with
	// deleteFiles, their data folder, which it returns.
	DeleteUserData(ctx context.Context, user string, deleteFiles bool) (string, error)
}

// troubleStates are the server states that are not trouble.
var fineStates = []string{"", "connected", "connecting", "retiring", "sleeping"}

// ListUsers lists the users with what they hold: tokens, connected apps,
// servers in trouble.
func (t *TokenAdmin) ListUsers(ctx context.Context) ([]control.UserInfo, error) {
	users, err := t.Store.ListUsers(ctx)
	if err != nil {
		return nil, mapAuthErr(err)
	}
	trouble := map[string][]string{}
	if t.Host != nil {
		// The status of every user at once; a host that cannot say leaves
		// the column empty rather than the list.
		if st, err := t.Host.Status(ctx, ""); err == nil {
			for _, e := range st {
				if e.User != "" && !slices.Contains(fineStates, e.State) {
					line := e.Name + ": " + e.State
					if e.Reason != "" {
						line += " (" + e.Reason + ")"
					}
					trouble[e.User] = append(trouble[e.User], line)
				}
			}
		}
	}
	out := make([]control.UserInfo, 0, len(users))
	for _, u := range users {
		info := userInfo(u)
		if t.Apps != nil {
			if g, err := t.Apps.Grants(ctx, u.Name); err == nil {
				info.Apps = len(g)
			}
		}
		info.Trouble = trouble[u.Name]
		out = append(out, info)
	}
	return out, nil
}

func userInfo(u auth.User) control.UserInfo {
	return control.UserInfo{Name: u.Name, Source: u.Source, Email: u.Email, Created: u.Created, LastSeen: u.LastSeen,
		Disabled: u.Disabled, DisabledBy: u.DisabledBy, Groups: u.Groups, OperatorGroups: u.OperatorGroups, Tokens: u.Tokens}
}

// DisableUser disables user at once: the store revokes their tokens,
// sessions and login links, and its subscribers (the server) their OAuth
// grants, MCP sessions and processes.
func (t *TokenAdmin) DisableUser(ctx context.Context, user string) error {
	return mapAuthErr(t.Store.DisableUser(ctx, user, "operator"))
}

// EnableUser lets user sign in again; their old tokens stay revoked.
func (t *TokenAdmin) EnableUser(ctx context.Context, user string) error {
	return mapAuthErr(t.Store.EnableUser(ctx, user))
}

// DeleteUser deletes user as DisableUser revokes, then their settings and
// secrets, and with deleteData their data folder (else it is kept, and
// named in the result).
func (t *TokenAdmin) DeleteUser(ctx context.Context, user string, deleteData bool) (control.UserDeleted, error) {
	if err := t.Store.DeleteUser(ctx, user); err != nil {
		return control.UserDeleted{}, mapAuthErr(err)
	}
	res := control.UserDeleted{User: user}
	if t.Host == nil {
		if deleteData {
			return res, errors.New("this host cannot delete user data")
		}
		return res, nil
	}
	dir, err := t.Host.DeleteUserData(ctx, user, deleteData)
	res.Folder, res.DataDeleted = dir, deleteData && err == nil
	if err != nil {
		return res, fmt.Errorf("user %q deleted, but not all their data: %w", user, err)
	}
	return res, nil
}

// SetUserGroups replaces the groups the operator gives user.
func (t *TokenAdmin) SetUserGroups(ctx context.Context, user string, groups []string) (control.UserInfo, error) {
	u, err := t.Store.SetOperatorGroups(ctx, user, groups)
	if err != nil {
		return control.UserInfo{}, mapAuthErr(err)
	}
	return userInfo(u), nil
}
