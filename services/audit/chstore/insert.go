package chstore

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// Insert stores events, MaxBatch per request. Inserting an event again
// (same cluster ID, revision and key) replaces it rather than adding a
// row, so a replay after a failure or a restart is harmless.
func (s *Store) Insert(ctx context.Context, events []audit.Event) error {
	for len(events) > 0 {
		n := min(len(events), MaxBatch)
		if err := s.insert(ctx, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

func (s *Store) insert(ctx context.Context, events []audit.Event) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body) // one JSON object per line
	enc.SetEscapeHTML(false)
	for _, e := range events {
		if err := enc.Encode(toRow(e, earliestWins(e.At))); err != nil {
			return err
		}
	}
	return s.post(ctx, "INSERT INTO events FORMAT JSONEachRow", body.Bytes())
}

// earliestWins is the version ReplacingMergeTree keeps the highest of: a
// replay of an event whose time is when the tailer read it (a release, an
// expiry) has a later time, and the first reading, nearest the truth, stays.
func earliestWins(at time.Time) uint64 {
	return math.MaxUint64 - uint64(at.UnixMilli())
}
