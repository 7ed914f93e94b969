// Package latency summarises a sample of latencies the one way every
// Lockplane benchmark and gate reports them: nearest-rank percentiles.
package latency

import (
	"slices"
	"time"
)

// Percentile is the nearest-rank percentile p (0-100) of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Summary is a sample's p50, p99 and max, in milliseconds.
type Summary struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Summarize sorts sample in place and summarises it.
func Summarize(sample []time.Duration) Summary {
	slices.Sort(sample)
	if len(sample) == 0 {
		return Summary{}
	}
	return Summary{N: len(sample), P50ms: Ms(Percentile(sample, 50)), P99ms: Ms(Percentile(sample, 99)), MaxMs: Ms(sample[len(sample)-1])}
}

// Ms is d in milliseconds, to the microsecond.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
