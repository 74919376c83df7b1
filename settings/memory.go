package settings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemoryStore is a [Store] that keeps values in memory, for tests and for
// hosts that need no persistence. It is safe for concurrent use.
type MemoryStore struct {
	locks keyLocks

	mu     sync.RWMutex
	closed bool
	rows   map[rowKey]memRow
}

type rowKey struct{ ext, user, section string }

func (k rowKey) String() string { return k.ext + "\x00" + k.user + "\x00" + k.section }

type memRow struct {
	value     json.RawMessage
	version   int64
	updatedAt time.Time
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{rows: map[rowKey]memRow{}}
}

// Get returns the section's values, or "{}" when none are set.
func (s *MemoryStore) Get(ctx context.Context, ext, user, section string) (json.RawMessage, error) {
	v, _, err := s.get(ctx, ext, user, section)
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", sectionRef(ext, user, section), err)
	}
	return v, nil
}

// get returns a copy of the section's values and their version (0 when
// unset).
func (s *MemoryStore) get(ctx context.Context, ext, user, section string) (json.RawMessage, int64, error) {
	if err := checkKey(ext, user, section); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, 0, ErrClosed
	}
	r, ok := s.rows[rowKey{ext, user, section}]
	if !ok {
		return bytes.Clone(emptyObject), 0, nil
	}
	return bytes.Clone(r.value), r.version, nil
}

// Set replaces the section's values.
func (s *MemoryStore) Set(ctx context.Context, ext, user, section string, values json.RawMessage) error {
	if err := s.write(ctx, ext, user, section, values, -1); err != nil {
		return fmt.Errorf("setting %s: %w", sectionRef(ext, user, section), err)
	}
	return nil
}

// errConflict reports a lost compare-and-swap; Update retries on it.
var errConflict = errors.New("version conflict")

// write stores values if the row's version is want (0: absent), or
// unconditionally when want is -1.
func (s *MemoryStore) write(ctx context.Context, ext, user, section string, values json.RawMessage, want int64) error {
	if err := checkKey(ext, user, section); err != nil {
		return err
	}
	v, err := compactObject(values)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	k := rowKey{ext, user, section}
	old := s.rows[k]
	if want >= 0 && old.version != want {
		return errConflict
	}
	s.rows[k] = memRow{value: v, version: old.version + 1, updatedAt: time.Now()}
	return nil
}

// Update is an atomic read-modify-write of one section; see [Store].
func (s *MemoryStore) Update(ctx context.Context, ext, user, section string, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	if err := update(ctx, &s.locks, rowKey{ext, user, section}, s.get, s.write, fn); err != nil {
		return fmt.Errorf("updating %s: %w", sectionRef(ext, user, section), err)
	}
	return nil
}

// update runs the compare-and-swap loop shared by the stores: read the
// values and their version, compute the new values, write them if the
// version is unchanged, else start over. The per-key lock makes Updates in
// this process wait for each other rather than retry; the version check
// catches every other writer (Set, DeleteUser, another process).
func update(ctx context.Context, locks *keyLocks, k rowKey,
	get func(ctx context.Context, ext, user, section string) (json.RawMessage, int64, error),
	write func(ctx context.Context, ext, user, section string, values json.RawMessage, want int64) error,
	fn func(old json.RawMessage) (json.RawMessage, error),
) error {
	if err := checkKey(k.ext, k.user, k.section); err != nil {
		return err
	}
	if fn == nil {
		return invalidf("nil update function")
	}
	unlock, err := locks.lock(ctx, k.String())
	if err != nil {
		return err
	}
	defer unlock()
	for {
		old, version, err := get(ctx, k.ext, k.user, k.section)
		if err != nil {
			return err
		}
		values, err := fn(old)
		if err != nil {
			return err
		}
		err = write(ctx, k.ext, k.user, k.section, values, version)
		if err != errConflict {
			return err
		}
	}
}

// Sections returns every section the user has values for in ext.
func (s *MemoryStore) Sections(ctx context.Context, ext, user string) (map[string]json.RawMessage, error) {
	if err := checkKey(ext, user, "-"); err != nil {
		return nil, fmt.Errorf("listing sections of extension %q for user %q: %w", ext, user, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing sections of extension %q for user %q: %w", ext, user, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("listing sections of extension %q for user %q: %w", ext, user, ErrClosed)
	}
	out := map[string]json.RawMessage{}
	for k, r := range s.rows {
		if k.ext == ext && k.user == user {
			out[k.section] = bytes.Clone(r.value)
		}
	}
	return out, nil
}

// DeleteUser removes all of the user's values, in every extension.
func (s *MemoryStore) DeleteUser(ctx context.Context, user string) error {
	if err := checkKey("-", user, "-"); err != nil {
		return fmt.Errorf("deleting user %q: %w", user, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deleting user %q: %w", user, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("deleting user %q: %w", user, ErrClosed)
	}
	for k := range s.rows {
		if k.user == user {
			delete(s.rows, k)
		}
	}
	return nil
}

// Users returns, sorted, the users that have values in ext.
func (s *MemoryStore) Users(ctx context.Context, ext string) ([]string, error) {
	if err := checkKey(ext, "-", "-"); err != nil {
		return nil, fmt.Errorf("listing users of extension %q: %w", ext, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing users of extension %q: %w", ext, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("listing users of extension %q: %w", ext, ErrClosed)
	}
	seen := map[string]bool{}
	users := []string{}
	for k := range s.rows {
		if k.ext == ext && !seen[k.user] {
			seen[k.user] = true
			users = append(users, k.user)
		}
	}
	slices.Sort(users)
	return users, nil
}

// Close drops the values. Later calls to any method return [ErrClosed];
// Close itself may be called more than once.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.rows = nil
	return nil
}
