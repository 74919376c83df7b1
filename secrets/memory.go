package secrets

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// Memory is a Store that keeps secrets in process memory, guarded by a
// mutex. It is meant for tests and for embedding the host in a process that
// manages secrets itself; nothing survives the process.
//
// The zero Memory is not usable; call [NewMemory].
type Memory struct {
	mu     sync.RWMutex
	closed bool
	users  map[string]map[string]map[string]string // user → extension → name → value
}

// NewMemory returns an empty in-memory Store.
func NewMemory() *Memory {
	return &Memory{users: make(map[string]map[string]map[string]string)}
}

// Get implements [Store.Get].
func (m *Memory) Get(ctx context.Context, k Key) (Value, error) {
	if err := k.Validate(); err != nil {
		return Value{}, err
	}
	if err := ctx.Err(); err != nil {
		return Value{}, wrapOp("getting "+k.String(), err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Value{}, wrapOp("getting "+k.String(), errClosed)
	}
	v, ok := m.users[k.User][k.Extension][k.Name]
	if !ok {
		return Value{}, wrapOp("getting "+k.String(), ErrNotFound)
	}
	return Value{s: v}, nil
}

// Set implements [Store.Set].
func (m *Memory) Set(ctx context.Context, k Key, v Value) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if err := validateValue(v); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return wrapOp("setting "+k.String(), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return wrapOp("setting "+k.String(), errClosed)
	}
	exts := m.users[k.User]
	if exts == nil {
		exts = make(map[string]map[string]string)
		m.users[k.User] = exts
	}
	names := exts[k.Extension]
	if names == nil {
		names = make(map[string]string)
		exts[k.Extension] = names
	}
	names[k.Name] = v.s
	return nil
}

// Delete implements [Store.Delete].
func (m *Memory) Delete(ctx context.Context, k Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	op := "deleting " + k.String()
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return wrapOp(op, errClosed)
	}
	exts := m.users[k.User]
	names := exts[k.Extension]
	delete(names, k.Name)
	if len(names) == 0 {
		delete(exts, k.Extension)
	}
	if len(exts) == 0 {
		delete(m.users, k.User)
	}
	return nil
}

// List implements [Store.List].
func (m *Memory) List(ctx context.Context, extension, user string) ([]string, error) {
	if err := validateListArgs(extension, user); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapOp("listing the secrets of "+describeScope(extension, user), err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, wrapOp("listing the secrets of "+describeScope(extension, user), errClosed)
	}
	return slices.Sorted(maps.Keys(m.users[user][extension])), nil
}

// DeleteUser implements [Store.DeleteUser].
func (m *Memory) DeleteUser(ctx context.Context, user string) error {
	if err := validatePart("key user", user, true); err != nil {
		return err
	}
	op := "deleting the secrets of user " + describeUser(user)
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return wrapOp(op, errClosed)
	}
	delete(m.users, user)
	return nil
}

// Close implements [Store.Close]. It drops every secret the Memory holds.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.users = nil
	return nil
}
