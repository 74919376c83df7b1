package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/host/internal/auth"
)

// userChangeTimeout bounds what a user's change does here (stopping their
// processes takes longest).
const userChangeTimeout = time.Minute

// userChanged carries a change of the users table to the surfaces and
// the host, on the goroutine that made it, so that when DisableUser (the
// operator's verb, or a sign-in the provider no longer vouches for)
// returns, everything of the user is over: their OAuth grants revoked
// (which closes their MCP sessions, as a revoked token's), any session
// left closed, their processes stopped and further activations refused.
// Their tokens, web sessions and login links went in the store's own
// transaction.
func (s *Server) userChanged(ev auth.UserEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), userChangeTimeout)
	defer cancel()
	log := s.log.With("user", ev.User, "change", ev.Change.String())
	switch ev.Change {
	case auth.UserDisabled, auth.UserDeleted:
		if s.oauth != nil {
			if _, err := s.oauth.RevokeUser(ctx, ev.User); err != nil {
				log.Error("revoking the OAuth grants of a user", "err", err)
			}
		}
		s.ep.CloseUser(ev.User)
		if err := s.h.DisableUser(ctx, ev.User); err != nil {
			log.Error("stopping a user's processes", "err", err)
		}
		if ev.Change == auth.UserDeleted {
			// The name is free again: a new user of that name starts
			// afresh (the deleted one's credentials are all gone).
			s.h.EnableUser(ev.User)
			_ = s.h.SetUserGroups(ctx, ev.User, nil)
		}
	case auth.UserEnabled:
		s.h.EnableUser(ev.User)
	case auth.UserGroupsChanged:
		u, err := s.auth.User(ctx, ev.User)
		if err != nil {
			log.Error("reading a user's groups", "err", err)
			return
		}
		if err := s.h.SetUserGroups(ctx, ev.User, u.Groups); err != nil {
			log.Error("passing a user's groups to the host", "err", err)
		}
	}
}

// syncUsers records in the users table the users the settings store
// knows (an install from before the table), and tells the host who is
// disabled and everyone's groups.
func (s *Server) syncUsers(ctx context.Context) error {
	known, err := s.h.KnownUsers(ctx)
	if err != nil {
		return fmt.Errorf("listing the users of the settings store: %w", err)
	}
	if n, err := s.auth.RecordUsers(ctx, known); err != nil {
		return err
	} else if n > 0 {
		s.log.Info("users recorded from the settings store", "users", n)
	}
	users, err := s.auth.ListUsers(ctx)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.IsDisabled() {
			if err := s.h.DisableUser(ctx, u.Name); err != nil {
				return err
			}
		}
		if len(u.Groups) > 0 {
			if err := s.h.SetUserGroups(ctx, u.Name, u.Groups); err != nil {
				return err
			}
		}
	}
	return nil
}
