package exttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/ext"
)

// Session is an [ext.Session] for tests: it declares the capabilities it is
// given, records every notification, and answers requests with Answer. It
// is safe for concurrent use.
type Session struct {
	// Caps is the declared capabilities object ({} when nil).
	Caps json.RawMessage
	// Answer answers requests (nil: every request fails with
	// ext.ErrUnimplemented).
	Answer func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)

	mu      sync.Mutex
	notes   []Notification
	asked   []string
	changed chan struct{}
}

var _ ext.Session = (*Session)(nil)

// Capabilities implements [ext.Session].
func (s *Session) Capabilities() json.RawMessage {
	if s.Caps == nil {
		return json.RawMessage("{}")
	}
	return s.Caps
}

func (s *Session) wake() {
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
}

// Notify implements [ext.Session]: it records the notification.
func (s *Session) Notify(_ context.Context, method string, params json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, Notification{Method: method, Params: slices.Clone(params)})
	s.wake()
	return nil
}

// Request implements [ext.Session] with Answer.
func (s *Session) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	s.mu.Lock()
	s.asked = append(s.asked, method)
	s.wake()
	s.mu.Unlock()
	if s.Answer == nil {
		return nil, fmt.Errorf("the test session answers no %s: %w", method, ext.ErrUnimplemented)
	}
	return s.Answer(ctx, method, params)
}

// Notes returns the notifications received so far.
func (s *Session) Notes() []Notification {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.notes)
}

// Asked returns the methods of the requests received so far.
func (s *Session) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

// WaitNote waits until a notification with method arrived, or ctx ends.
func (s *Session) WaitNote(ctx context.Context, method string) (Notification, error) {
	for {
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		for _, n := range s.notes {
			if n.Method == method {
				s.mu.Unlock()
				return n, nil
			}
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Notification{}, fmt.Errorf("waiting for %s: %w", method, ctx.Err())
		}
	}
}
