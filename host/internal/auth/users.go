package auth

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Sources name where a user came from ([User.Source]).
const (
	// SourceOperator: the operator named them (a token or a login link
	// issued with the CLI, the control socket or the operator API).
	SourceOperator = "operator"
	// SourceOIDC: they signed in through the OpenID provider.
	SourceOIDC = "oidc"
	// SourceExisting: they were known before the users table existed
	// (backfilled from their tokens, sessions, login links or data).
	SourceExisting = "existing"
)

// User is a person the host knows.
type User struct {
	// Name is the user ID, e.g. "alice".
	Name string `json:"name"`
	// Created is when the host first knew them.
	Created time.Time `json:"created"`
	// LastSeen is when they last used a token or a web session, or
	// signed in (recorded at most once per Options.TouchEvery); zero if
	// never.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Source is where they came from: [SourceOperator], [SourceOIDC],
	// [SourceExisting], or another short word a caller chose ("demo").
	Source string `json:"source"`
	// Email is the address their provider gave, if any.
	Email string `json:"email,omitempty"`
	// Issuer and Subject name them at their OpenID provider; a user is
	// bound to one (Issuer, Subject) once it is set.
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Groups is the union of ProviderGroups and OperatorGroups, sorted:
	// the groups a shared server's allowlist can name.
	Groups []string `json:"groups"`
	// ProviderGroups come from the provider's groups claim, replaced at
	// each sign-in; OperatorGroups are the operator's (SetOperatorGroups),
	// which no sign-in changes.
	ProviderGroups []string `json:"providerGroups"`
	OperatorGroups []string `json:"operatorGroups"`
	// Disabled is when they were disabled (zero: enabled) and DisabledBy
	// who did it ("operator", "oidc"…).
	Disabled   time.Time `json:"disabled,omitzero"`
	DisabledBy string    `json:"disabledBy,omitempty"`
	// Tokens counts their live bearer tokens.
	Tokens int `json:"tokens"`
}

// IsDisabled reports whether the user is disabled.
func (u User) IsDisabled() bool { return !u.Disabled.IsZero() }

// UserInfo is what [Store.UpsertUser] records of a user. A zero field
// leaves the stored value as it is, except Groups (see there).
type UserInfo struct {
	// Source is recorded when the user is created (default
	// [SourceOperator]); it never changes afterwards.
	Source string
	// Email replaces the stored address when not empty.
	Email string
	// Issuer and Subject bind the user to an identity at an OpenID
	// provider. Once bound, another (Issuer, Subject) for the same name
	// is [ErrConflict], and so is one bound to another name.
	Issuer, Subject string
	// Groups, when not nil, replaces the provider's groups (an empty
	// non-nil slice clears them); nil leaves them as they are.
	Groups []string
}

// UserChange says what happened to a user, for [Store.OnUserChange].
type UserChange int

// The changes [Store.OnUserChange] subscribers hear of.
const (
	// UserDisabled: the user is disabled; their tokens, sessions and
	// login links are gone. Revoke what else they hold.
	UserDisabled UserChange = iota + 1
	// UserEnabled: the user may sign in again.
	UserEnabled
	// UserDeleted: the user is gone, as for UserDisabled.
	UserDeleted
	// UserGroupsChanged: the user's groups ([User.Groups]) changed.
	UserGroupsChanged
)

func (c UserChange) String() string {
	switch c {
	case UserDisabled:
		return "disabled"
	case UserEnabled:
		return "enabled"
	case UserDeleted:
		return "deleted"
	case UserGroupsChanged:
		return "groups changed"
	}
	return fmt.Sprintf("UserChange(%d)", int(c))
}

// UserEvent is a change to one user.
type UserEvent struct {
	User   string
	Change UserChange
}

// More sentinel errors.
var (
	// ErrUserDisabled is returned for a disabled user's sign-in, token,
	// login link or session.
	ErrUserDisabled = errors.New("user is disabled")
	// ErrConflict is returned when an OpenID identity is bound to another
	// user, or the user to another identity.
	ErrConflict = errors.New("conflict")
)

var (
	validSource = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
)

// CheckGroup reports whether g is a valid group name: 1-128 printable
// characters, no comma, no leading or trailing space.
func CheckGroup(g string) error {
	bad := g == "" || len(g) > 128 || strings.TrimSpace(g) != g || strings.ContainsFunc(g, func(r rune) bool {
		return r == ',' || !unicode.IsPrint(r)
	})
	if bad {
		return fmt.Errorf("group %q is not valid (want 1-128 printable characters, no comma, no leading or trailing space): %w", g, ErrInvalidArgument)
	}
	return nil
}

// normGroups checks groups and returns them sorted without duplicates.
func normGroups(groups []string) ([]string, error) {
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		if err := CheckGroup(g); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// userColumns are the columns scanUser reads, in its order.
const userColumns = `name, created_at, last_seen_at, source, email, oidc_issuer, oidc_subject,
	provider_groups, operator_groups, disabled_at, disabled_by,
	(SELECT count(*) FROM tokens WHERE tokens.user_id = users.name AND tokens.operator = 0)`

type scanner interface{ Scan(dest ...any) error }

func scanUser(r scanner) (User, error) {
	var (
		u                           User
		created, seen, disabled     int64
		providerGroups, operatorGrp string
	)
	if err := r.Scan(&u.Name, &created, &seen, &u.Source, &u.Email, &u.Issuer, &u.Subject,
		&providerGroups, &operatorGrp, &disabled, &u.DisabledBy, &u.Tokens); err != nil {
		return User{}, err
	}
	u.Created, u.LastSeen, u.Disabled = fromMS(created), fromMS(seen), fromMS(disabled)
	if err := json.Unmarshal([]byte(providerGroups), &u.ProviderGroups); err != nil {
		return User{}, fmt.Errorf("user %q: provider groups: %w", u.Name, err)
	}
	if err := json.Unmarshal([]byte(operatorGrp), &u.OperatorGroups); err != nil {
		return User{}, fmt.Errorf("user %q: operator groups: %w", u.Name, err)
	}
	u.Groups = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(u.ProviderGroups), u.OperatorGroups...))))
	if u.Groups == nil {
		u.Groups = []string{}
	}
	return u, nil
}

func groupsJSON(groups []string) string {
	if groups == nil {
		groups = []string{}
	}
	b, _ := json.Marshal(groups)
	return string(b)
}

// readUser reads one user in tx; a missing one is [ErrNotFound].
func readUser(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, name string) (User, error) {
	u, err := scanUser(q.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("user %q: %w", name, ErrNotFound)
	}
	return u, err
}

// User returns the user called name; an unknown one is [ErrNotFound].
func (s *Store) User(ctx context.Context, name string) (User, error) {
	if s.closed.Load() {
		return User{}, ErrClosed
	}
	u, err := readUser(ctx, s.db, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return User{}, fmt.Errorf("reading user %q: %w", name, s.mapErr(err))
	}
	return u, err
}

// ListUsers lists every user, by name.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+userColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing users: %w", s.mapErr(err))
	}
	defer rows.Close()
	out := []User{}
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("listing users: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing users: %w", s.mapErr(err))
	}
	return out, nil
}

// UpsertUser records a user's sign-in (or the operator naming them):
// it creates the user if new, else updates what info carries (see
// [UserInfo]), and records them as seen now. A disabled user is refused
// with [ErrUserDisabled] (and the stored User); an identity bound to
// another user, or a user bound to another identity, is [ErrConflict].
// When the user's groups change, the [Store.OnUserChange] subscribers
// hear of it.
func (s *Store) UpsertUser(ctx context.Context, name string, info UserInfo) (User, error) {
	if err := checkUser(name); err != nil {
		return User{}, err
	}
	source := info.Source
	if source == "" {
		source = SourceOperator
	}
	if !validSource.MatchString(source) {
		return User{}, fmt.Errorf("user source %q is not valid (want a short lower-case word): %w", source, ErrInvalidArgument)
	}
	if (info.Issuer == "") != (info.Subject == "") {
		return User{}, fmt.Errorf("user %q: an OpenID identity needs both issuer and subject: %w", name, ErrInvalidArgument)
	}
	var groups []string
	if info.Groups != nil {
		g, err := normGroups(info.Groups)
		if err != nil {
			return User{}, fmt.Errorf("user %q: %w", name, err)
		}
		groups = g
	}
	now := s.now()
	var (
		u       User
		changed bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		old, err := readUser(ctx, tx, name)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if exists && old.IsDisabled() {
			u = old
			return fmt.Errorf("user %q (disabled by %s): %w", name, old.DisabledBy, ErrUserDisabled)
		}
		if info.Subject != "" {
			if exists && old.Subject != "" && (old.Issuer != info.Issuer || old.Subject != info.Subject) {
				return fmt.Errorf("user %q is bound to another identity at %s: %w", name, old.Issuer, ErrConflict)
			}
			var other string
			err := tx.QueryRowContext(ctx, `SELECT name FROM users WHERE oidc_issuer = ? AND oidc_subject = ? AND name != ?`,
				info.Issuer, info.Subject, name).Scan(&other)
			if err == nil {
				return fmt.Errorf("the identity signing in as %q at %s is already user %q: %w", name, info.Issuer, other, ErrConflict)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if !exists {
			if _, err := tx.ExecContext(ctx, `INSERT INTO users (name, created_at, source) VALUES (?, ?, ?)`, name, ms(now), source); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, userUpdate, ms(now), info.Email, info.Issuer, info.Subject, nullableGroups(info.Groups, groups), name); err != nil {
			return err
		}
		u, err = readUser(ctx, tx, name)
		if err != nil {
			return err
		}
		changed = exists && !slices.Equal(old.Groups, u.Groups) || !exists && len(u.Groups) > 0
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrUserDisabled) || errors.Is(err, ErrConflict) {
			return u, err
		}
		return User{}, fmt.Errorf("recording user %q: %w", name, err)
	}
	s.markSeen(name, now)
	if changed {
		s.userEvents.Run(UserEvent{User: name, Change: UserGroupsChanged})
	}
	return u, nil
}

// userUpdate is UpsertUser's update: ?1 seen, ?2 email, ?3 issuer, ?4
// subject, ?5 provider groups (NULL: unchanged), ?6 name.
const userUpdate = `UPDATE users SET last_seen_at = ?1,
	email = CASE WHEN ?2 = '' THEN email ELSE ?2 END,
	oidc_issuer = CASE WHEN ?3 = '' THEN oidc_issuer ELSE ?3 END,
	oidc_subject = CASE WHEN ?4 = '' THEN oidc_subject ELSE ?4 END,
	provider_groups = coalesce(?5, provider_groups)
	WHERE name = ?6`

func nullableGroups(given, norm []string) any {
	if given == nil {
		return nil
	}
	return groupsJSON(norm)
}

// SetOperatorGroups replaces the groups the operator gave user (an
// unknown user is [ErrNotFound]); the provider's groups stay. The
// [Store.OnUserChange] subscribers hear of a change.
func (s *Store) SetOperatorGroups(ctx context.Context, name string, groups []string) (User, error) {
	norm, err := normGroups(groups)
	if err != nil {
		return User{}, fmt.Errorf("user %q: %w", name, err)
	}
	var (
		u       User
		changed bool
	)
	err = s.write(ctx, func(tx *sql.Tx) error {
		old, err := readUser(ctx, tx, name)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE users SET operator_groups = ? WHERE name = ?`, groupsJSON(norm), name); err != nil {
			return err
		}
		u, err = readUser(ctx, tx, name)
		changed = err == nil && !slices.Equal(old.Groups, u.Groups)
		return err
	})
	if err != nil {
		return User{}, fmt.Errorf("setting the groups of user %q: %w", name, err)
	}
	if changed {
		s.userEvents.Run(UserEvent{User: name, Change: UserGroupsChanged})
	}
	return u, nil
}

// DisableUser disables user, recording by (who did it: "operator",
// "oidc"…). In the same transaction it revokes their tokens (which
// [Store.Verify] then calls revoked), ends their web sessions and voids
// their login links; then the [Store.OnRevoke] subscribers hear of each
// token and the [Store.OnUserChange] subscribers of the user, to revoke
// what this store does not keep (OAuth grants, MCP sessions, processes).
// Until [Store.EnableUser], the user's sign-ins ([Store.UpsertUser]),
// new tokens, login links and sessions are [ErrUserDisabled]. Disabling
// a disabled user revokes again and keeps the first time and author. An
// unknown user is [ErrNotFound].
func (s *Store) DisableUser(ctx context.Context, name, by string) error {
	if by == "" {
		by = SourceOperator
	}
	now := s.now()
	var tokens []string
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET disabled_at = CASE WHEN disabled_at = 0 THEN ? ELSE disabled_at END,
			disabled_by = CASE WHEN disabled_at = 0 THEN ? ELSE disabled_by END WHERE name = ?`, ms(now), by, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("user %q: %w", name, ErrNotFound)
		}
		tokens, err = revokeUser(ctx, tx, name, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("disabling user %q: %w", name, err)
	}
	s.logger.Info("user disabled", "user", name, "by", by, "tokens_revoked", len(tokens))
	s.afterRevokeUser(name, tokens, UserDisabled)
	return nil
}

// EnableUser lets a disabled user sign in again. Their revoked tokens
// stay revoked. Enabling an enabled user does nothing; an unknown user is
// [ErrNotFound].
func (s *Store) EnableUser(ctx context.Context, name string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET disabled_at = 0, disabled_by = '' WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("user %q: %w", name, ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("enabling user %q: %w", name, err)
	}
	s.logger.Info("user enabled", "user", name)
	s.userEvents.Run(UserEvent{User: name, Change: UserEnabled})
	return nil
}

// DeleteUser removes user from this store: as [Store.DisableUser], then
// the user itself, so that the name is free (a new sign-in or token
// creates a new user). What other stores keep of them (settings,
// secrets, grants, data) is the caller's to remove; the
// [Store.OnUserChange] subscribers hear UserDeleted. An unknown user is
// [ErrNotFound].
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	now := s.now()
	var tokens []string
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM users WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("user %q: %w", name, ErrNotFound)
		}
		tokens, err = revokeUser(ctx, tx, name, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting user %q: %w", name, err)
	}
	s.seenMu.Lock()
	delete(s.seen, name)
	s.seenMu.Unlock()
	s.logger.Info("user deleted", "user", name, "tokens_revoked", len(tokens))
	s.afterRevokeUser(name, tokens, UserDeleted)
	return nil
}

// revokeUser revokes every token of user, ends their sessions and voids
// their login links in tx, returning the revoked tokens' IDs.
func revokeUser(ctx context.Context, tx *sql.Tx, user string, now time.Time) ([]string, error) {
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO revoked_tokens (hash, revoked_at)
		SELECT hash, ? FROM tokens WHERE user_id = ? AND operator = 0`, ms(now), user); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `DELETE FROM tokens WHERE user_id = ? AND operator = 0 RETURNING id`, user)
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ? AND operator = 0`, user); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM login_links WHERE user_id = ?`, user); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

func (s *Store) afterRevokeUser(name string, tokens []string, change UserChange) {
	for _, id := range tokens {
		s.revoked.Run(id)
	}
	s.userEvents.Run(UserEvent{User: name, Change: change})
}

// OnUserChange registers fn to be called whenever a user is disabled,
// enabled or deleted, or their groups change, after the change is
// committed. fn runs on the changing goroutine, so that the change's
// caller returns once every subscriber has acted (the server's stops the
// user's processes, which may take seconds); it must not call back into
// the change. The returned function unregisters fn; it may be called
// more than once.
func (s *Store) OnUserChange(fn func(UserEvent)) (cancel func()) {
	return s.userEvents.Add(fn)
}

// admitUser makes sure user exists (creating them with source) and is not
// disabled, in tx: the check of every credential issued to a user.
func admitUser(ctx context.Context, tx *sql.Tx, user, source string, now time.Time) error {
	var disabled int64
	var by string
	err := tx.QueryRowContext(ctx, `SELECT disabled_at, disabled_by FROM users WHERE name = ?`, user).Scan(&disabled, &by)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.ExecContext(ctx, `INSERT INTO users (name, created_at, source) VALUES (?, ?, ?)`, user, ms(now), source)
		return err
	}
	if err != nil {
		return err
	}
	if disabled != 0 {
		return fmt.Errorf("user %q (disabled by %s): %w", user, by, ErrUserDisabled)
	}
	return nil
}

// RecordUsers records users known elsewhere (a settings store, a data
// folder) that this store does not list yet, with source
// [SourceExisting], and returns how many it added. Invalid names are
// skipped. A user already listed, disabled or not, is left as it is.
func (s *Store) RecordUsers(ctx context.Context, names []string) (int, error) {
	now := s.now()
	added := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		added = 0
		for _, n := range names {
			if checkUser(n) != nil {
				continue
			}
			res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO users (name, created_at, source) VALUES (?, ?, ?)`, n, ms(now), SourceExisting)
			if err != nil {
				return err
			}
			k, _ := res.RowsAffected()
			added += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("recording users: %w", err)
	}
	return added, nil
}

// SeenUser records that user was active now, at most once per
// Options.TouchEvery per user (kept in memory; the write is skipped when
// not due). [Store.Verify] and [Store.Session] call it; so may the other
// surfaces that accept a user's credential (OAuth access tokens).
func (s *Store) SeenUser(ctx context.Context, user string) {
	if user == "" || s.closed.Load() {
		return
	}
	now := s.now()
	s.seenMu.Lock()
	last, ok := s.seen[user]
	due := !ok || now.Sub(last) >= s.touchEvery
	if due {
		s.seen[user] = now
	}
	s.seenMu.Unlock()
	if !due {
		return
	}
	// A lost update only delays the next one.
	_ = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE users SET last_seen_at = ? WHERE name = ? AND last_seen_at < ?`, ms(now), user, ms(now))
		return err
	})
}

func (s *Store) markSeen(user string, now time.Time) {
	s.seenMu.Lock()
	s.seen[user] = now
	s.seenMu.Unlock()
}

// AdmitUser makes sure user exists, creating them with source (default
// [SourceOperator]), and refuses a disabled one with [ErrUserDisabled]:
// the check before a credential is given to a user this store does not
// issue (an OAuth grant).
func (s *Store) AdmitUser(ctx context.Context, user, source string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if source == "" {
		source = SourceOperator
	}
	if !validSource.MatchString(source) {
		return fmt.Errorf("user source %q is not valid: %w", source, ErrInvalidArgument)
	}
	err := s.write(ctx, func(tx *sql.Tx) error { return admitUser(ctx, tx, user, source, s.now()) })
	if err != nil && !errors.Is(err, ErrUserDisabled) {
		return fmt.Errorf("admitting user %q: %w", user, err)
	}
	return err
}
