package chstore

import "time"

// SetNow fixes the time the cost report takes as now (where a session
// still open has renewed until).
func SetNow(s *Store, now time.Time) { s.now = func() time.Time { return now } }
