// Package audittest is an in-memory audit store for tailer tests.
//
// The real store's own guarantees are tested against ClickHouse.
package audittest

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockplane/lockplane/services/audit"
)

// Store keeps events by (cluster ID, revision, key), as the ClickHouse
// store does, and counts rows written more than once.
type Store struct {
	mu      sync.Mutex
	rows    map[string]audit.Event
	order   []string
	Replays int
	changed chan struct{}
	// fail, when set, refuses inserts with its error; refused is closed
	// at the first refusal.
	fail    error
	refused chan struct{}
}

// FailNext makes the store refuse every insert with err until Heal; the
// channel closes at the first refusal.
func (s *Store) FailNext(err error) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail, s.refused = err, make(chan struct{})
	return s.refused
}

// Heal makes the store accept inserts again.
func (s *Store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = nil
}

// New is an empty store.
func New() *Store { return &Store{rows: map[string]audit.Event{}, changed: make(chan struct{})} }

// Insert implements audit.Store.
func (s *Store) Insert(_ context.Context, events []audit.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		select {
		case <-s.refused:
		default:
			close(s.refused)
		}
		return s.fail
	}
	for _, e := range events {
		id := fmt.Sprintf("%s/%d/%s", e.ClusterID, e.Revision, e.Key)
		if _, ok := s.rows[id]; ok {
			s.Replays++
		} else {
			s.order = append(s.order, id)
		}
		s.rows[id] = e
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// Events are the stored events in the order first inserted.
func (s *Store) Events() []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]audit.Event, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.rows[id])
	}
	return out
}

// Await returns once ok holds of the stored events, or ctx's error.
func (s *Store) Await(ctx context.Context, ok func([]audit.Event) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if ok(s.Events()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Of are the stored events of key, in revision order.
func Of(events []audit.Event, key string) []audit.Event {
	var out []audit.Event
	for _, e := range events {
		if e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// Kinds are the kinds of events, in order.
func Kinds(events []audit.Event) []audit.Kind {
	out := make([]audit.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}
