package settings

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Store holds settings values: one JSON object per (extension, user,
// section). It stores what it is given: validate values against their form
// with [ValidateValues] before writing them. It refuses only what is not a
// JSON object, with an error matching [ErrInvalid], and leaves the stored
// value unchanged.
//
// Every method is safe for concurrent use by any number of goroutines.
// Every method except Close returns an error matching [ErrClosed] after
// Close, and honours ctx.
type Store interface {
	// Get returns the section's values, or "{}" when none are set.
	Get(ctx context.Context, ext, user, section string) (json.RawMessage, error)
	// Set replaces the section's values.
	Set(ctx context.Context, ext, user, section string, values json.RawMessage) error
	// Update is an atomic read-modify-write of one section: fn gets the
	// current values ("{}" when unset) and returns the new ones. No write
	// is lost, whichever goroutine or process writes concurrently. fn may
	// be called more than once (when another writer got in first, it runs
	// again on the newer values), so it must have no side effects beyond
	// computing its result, and it must not call the store for the same
	// section. If fn returns an error, nothing is written and Update
	// returns that error, wrapped.
	Update(ctx context.Context, ext, user, section string, fn func(old json.RawMessage) (json.RawMessage, error)) error
	// Sections returns every section the user has values for in ext, by
	// section ID. It returns an empty map when there are none.
	Sections(ctx context.Context, ext, user string) (map[string]json.RawMessage, error)
	// DeleteUser removes all of the user's values, in every extension.
	DeleteUser(ctx context.Context, user string) error
	// Users returns, sorted, the users that have values in ext.
	Users(ctx context.Context, ext string) ([]string, error)
	// Close releases the store. It may be called more than once,
	// concurrently; later calls return the first call's result.
	Close() error
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*SQLiteStore)(nil)
)

// emptyObject is what Get returns for an unset section.
var emptyObject = json.RawMessage("{}")

// checkKey refuses an empty extension, user or section.
func checkKey(ext, user, section string) error {
	switch {
	case ext == "":
		return invalidf("extension is empty")
	case user == "":
		return invalidf("user is empty")
	case section == "":
		return invalidf("section is empty")
	}
	return nil
}

// compactObject returns values compacted, or an error matching ErrInvalid
// when they are not one JSON object.
func compactObject(values json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(values)
	if !json.Valid(trimmed) {
		return nil, invalidf("values are not valid JSON")
	}
	if trimmed[0] != '{' {
		var v any
		_ = json.Unmarshal(trimmed, &v) // valid, checked above
		return nil, invalidf("values must be a JSON object, not %s", typeName(v))
	}
	var buf bytes.Buffer
	buf.Grow(len(trimmed))
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, invalidf("values are not valid JSON: %v", err)
	}
	return buf.Bytes(), nil
}

// sectionRef names a section in errors.
func sectionRef(ext, user, section string) string {
	return fmt.Sprintf("section %q of extension %q for user %q", section, ext, user)
}

// keyLocks hands out one lock per key, so that concurrent Updates of one
// section in this process queue up instead of retrying, while Updates of
// different sections run in parallel. Entries live only while in use.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds a token while locked
	refs int
}

// lock locks key, or returns ctx's error if ctx ends first. The returned
// function unlocks it.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	return func() { <-l.ch; release() }, nil
}
