package latency_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/latency"
)

func TestNearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	s := latency.Summarize(lat)
	if s.N != 100 || s.P50ms != 50 || s.P99ms != 99 || s.MaxMs != 100 {
		t.Fatalf("summary of 1..100 ms: %+v", s)
	}
	if latency.Percentile(nil, 99) != 0 || latency.Summarize(nil) != (latency.Summary{}) {
		t.Fatal("an empty sample")
	}
}
