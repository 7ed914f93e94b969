package chstore

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/lockplane/lockplane/services/internal/audit"
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
	// The version ReplacingMergeTree keeps the latest of.
	ingested := uint64(time.Now().UnixNano())
	var body bytes.Buffer
	enc := json.NewEncoder(&body) // one JSON object per line
	enc.SetEscapeHTML(false)
	for _, e := range events {
		if err := enc.Encode(toRow(e, ingested)); err != nil {
			return err
		}
	}
	return s.post(ctx, "INSERT INTO events FORMAT JSONEachRow", body.Bytes())
}
