package election

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait between tries (Retry) and between terms (Run): a
// jittered exponential one, so that instances that failed together do
// not try again together, nor hammer a cluster that is down.
type Backoff struct {
	// Min is the first wait, doubling up to Max while tries keep failing
	// at once; a try that ran longer than Max resets it to Min. Min is a
	// second when not above zero; Max is at least Min.
	Min, Max time.Duration
	// After and Now are the clock; time.After and time.Now when nil
	// (tests inject their own).
	After func(time.Duration) <-chan time.Time
	Now   func() time.Time
}

// Retry calls try until it returns nil (true) or ctx ends (false). Each
// wait is between half the current backoff and all of it.
func (b Backoff) Retry(ctx context.Context, try func() error) bool {
	after, now := b.After, b.Now
	if after == nil {
		after = time.After
	}
	if now == nil {
		now = time.Now
	}
	// A zero Backoff would retry at once, for ever: Min defaults to a
	// second, and Max is at least Min.
	floor := b.Min
	if floor <= 0 {
		floor = time.Second
	}
	wait, ceiling := floor, max(b.Max, floor)
	for {
		start := now()
		if try() == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		// A try that ran long was not failing at once: whatever ended it
		// is news, not the same fault again.
		if now().Sub(start) > ceiling {
			wait = floor
		}
		select {
		case <-ctx.Done():
			return false
		case <-after(wait/2 + rand.N(wait/2+1)):
		}
		wait = min(2*wait, ceiling)
	}
}
