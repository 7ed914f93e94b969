package records

import (
	"testing"
	"time"
)

// The session record's bytes are what grants compare: they must not change
// for the same fields, with and without an instance.
func TestSessionEncodingIsStable(t *testing.T) {
	for _, tc := range []struct {
		s    Session
		want string
	}{
		{Session{Identity: "spiffe://td/a", TTLSeconds: 15}, `{"identity":"spiffe://td/a","ttl_seconds":15}`},
		{Session{Identity: "spiffe://td/a", Instance: "i-1", TTLSeconds: 15}, `{"identity":"spiffe://td/a","instance":"i-1","ttl_seconds":15}`},
	} {
		if got := tc.s.Encode(); got != tc.want {
			t.Errorf("%+v encodes as %s, want %s", tc.s, got, tc.want)
		}
		if back, err := DecodeSession([]byte(tc.want)); err != nil || back != tc.s {
			t.Errorf("%s decodes as %+v, %v", tc.want, back, err)
		}
	}
}

// A hold that did not wait carries no waited_ms, and a record written
// before waits were recorded decodes with none.
func TestHoldRoundTrips(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := Hold{Identity: "spiffe://td/a", Session: 7, Class: "c", Since: since}
	if got, want := h.Encode(), `{"identity":"spiffe://td/a","session":7,"class":"c","since":"2026-01-02T03:04:05Z"}`; got != want {
		t.Errorf("encodes as %s, want %s", got, want)
	}
	h.WaitedMs = 12
	back, err := DecodeHold([]byte(h.Encode()))
	if err != nil || back != h {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, h)
	}
}
