package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/ext"
)

// OperatorUser is the reserved user ID under which an extension keeps the
// operator's own secrets (for instance a shared server's credential). No
// real user can have it: user IDs start with a letter or digit.
const OperatorUser = "@operator"

// settingsStore keeps settings values per extension, user and section.
type settingsStore interface {
	Get(ctx context.Context, ext, user, section string) (json.RawMessage, error)
	Set(ctx context.Context, ext, user, section string, values json.RawMessage) error
}

// secretStore keeps secrets per extension, user and name.
type secretStore interface {
	Get(ctx context.Context, ext, user, name string) (string, error)
	Set(ctx context.Context, ext, user, name, value string) error
	Delete(ctx context.Context, ext, user, name string) error
	List(ctx context.Context, ext, user string) ([]string, error)
}

type memorySettings struct {
	mu sync.Mutex
	m  map[[3]string]json.RawMessage
}

func newMemorySettings() *memorySettings {
	return &memorySettings{m: map[[3]string]json.RawMessage{}}
}

func (s *memorySettings) Get(_ context.Context, e, user, section string) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[[3]string{e, user, section}]
	if !ok {
		return json.RawMessage("{}"), nil
	}
	return slices.Clone(v), nil
}

func (s *memorySettings) Set(_ context.Context, e, user, section string, values json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[[3]string{e, user, section}] = slices.Clone(values)
	return nil
}

type memorySecrets struct {
	mu sync.Mutex
	m  map[[3]string]string
}

func newMemorySecrets() *memorySecrets { return &memorySecrets{m: map[[3]string]string{}} }

func (s *memorySecrets) Get(_ context.Context, e, user, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[[3]string{e, user, name}]
	if !ok {
		return "", fmt.Errorf("secret %q: %w", name, ext.ErrNotFound)
	}
	return v, nil
}

func (s *memorySecrets) Set(_ context.Context, e, user, name, value string) error {
	if name == "" {
		return fmt.Errorf("empty secret name: %w", ext.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[[3]string{e, user, name}] = value
	return nil
}

func (s *memorySecrets) Delete(_ context.Context, e, user, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, [3]string{e, user, name})
	return nil
}

func (s *memorySecrets) List(_ context.Context, e, user string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.m {
		if k[0] == e && k[1] == user {
			out = append(out, k[2])
		}
	}
	slices.Sort(out)
	return out, nil
}
