package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/election"
)

// clock is a fake Backoff clock: After records each wait and fires at
// once (or calls onAfter, which may return a channel of its own); the
// time moves only when a try says so.
type clock struct {
	now     time.Time
	waits   []time.Duration
	onAfter func(n int) <-chan time.Time
}

func (c *clock) backoff(lo, hi time.Duration) election.Backoff {
	return election.Backoff{Min: lo, Max: hi, Now: func() time.Time { return c.now },
		After: func(d time.Duration) <-chan time.Time {
			c.waits = append(c.waits, d)
			if c.onAfter != nil {
				if ch := c.onAfter(len(c.waits)); ch != nil {
					return ch
				}
			}
			ch := make(chan time.Time, 1)
			ch <- c.now
			return ch
		}}
}

var errTry = errors.New("not yet")

// failing returns a try that fails n times, then succeeds; each try runs
// for ran(i) on the fake clock (i from 1).
func failing(c *clock, n int, ran func(i int) time.Duration) (func() error, *int) {
	tries := 0
	return func() error {
		tries++
		if ran != nil {
			c.now = c.now.Add(ran(tries))
		}
		if tries > n {
			return nil
		}
		return errTry
	}, &tries
}

// within fails unless each wait is jittered within (want/2, want]: at
// least half of it, at most all of it.
func within(t *testing.T, waits []time.Duration, want []time.Duration) {
	t.Helper()
	if len(waits) != len(want) {
		t.Fatalf("waited %d times (%v), want %d", len(waits), waits, len(want))
	}
	for i, w := range want {
		if waits[i] < w/2 || waits[i] > w {
			t.Fatalf("wait %d is %v, want between %v and %v (all waits %v)", i+1, waits[i], w/2, w, waits)
		}
	}
}

// Tries that fail at once wait longer each time, doubling from Min, and
// never longer than Max.
func TestTheBackoffGrowsUpToItsCap(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	try, tries := failing(c, 7, nil)
	if !c.backoff(time.Second, 8*time.Second).Retry(context.Background(), try) {
		t.Fatal("Retry gave up, want it to succeed on the 8th try")
	}
	if *tries != 8 {
		t.Fatalf("%d tries, want 8", *tries)
	}
	s := time.Second
	within(t, c.waits, []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s, 8 * s, 8 * s})
}

// A try that ran longer than Max was not failing at once: the next wait
// is Min's again, and grows from there.
func TestTheBackoffResetsAfterALongTry(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	try, _ := failing(c, 6, func(i int) time.Duration {
		if i == 4 {
			return 8*time.Second + 1 // past Max
		}
		if i == 5 {
			return 8 * time.Second // Max itself is not long
		}
		return 0
	})
	c.backoff(time.Second, 8*time.Second).Retry(context.Background(), try)
	s := time.Second
	within(t, c.waits, []time.Duration{s, 2 * s, 4 * s, s, 2 * s, 4 * s})
}

// A try that succeeds ends Retry with no wait at all.
func TestTheBackoffDoesNotWaitAfterASuccess(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	try, tries := failing(c, 0, nil)
	if !c.backoff(time.Second, 8*time.Second).Retry(context.Background(), try) || *tries != 1 || len(c.waits) != 0 {
		t.Fatalf("tries %d, waits %v: want one try and no wait", *tries, c.waits)
	}
}

// The context ending stops Retry during a wait (which never fires here)
// and after a failed try, without trying or waiting again.
func TestTheBackoffStopsWhenTheContextEnds(t *testing.T) {
	t.Run("while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &clock{now: time.Unix(1000, 0)}
		c.onAfter = func(n int) <-chan time.Time {
			if n < 3 {
				return nil
			}
			cancel()
			return make(chan time.Time) // never fires
		}
		try, tries := failing(c, 100, nil)
		if c.backoff(time.Second, 8*time.Second).Retry(ctx, try) {
			t.Fatal("Retry succeeded, want it to give up when the context ended")
		}
		if *tries != 3 {
			t.Fatalf("%d tries, want 3 (the context ended in the third wait)", *tries)
		}
	})
	t.Run("after a try", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &clock{now: time.Unix(1000, 0)}
		tries := 0
		try := func() error {
			if tries++; tries == 2 {
				cancel()
			}
			return errTry
		}
		if c.backoff(time.Second, 8*time.Second).Retry(ctx, try) {
			t.Fatal("Retry succeeded, want it to give up when the context ended")
		}
		if tries != 2 || len(c.waits) != 1 {
			t.Fatalf("%d tries and %d waits, want 2 and 1", tries, len(c.waits))
		}
	})
}

// A zero Backoff waits a second between tries, not none: it never spins.
func TestAZeroBackoffStillWaits(t *testing.T) {
	var waits []time.Duration
	tries := 0
	b := election.Backoff{After: func(d time.Duration) <-chan time.Time {
		waits = append(waits, d)
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}}
	b.Retry(context.Background(), func() error {
		if tries++; tries < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	for _, w := range waits {
		if w < 500*time.Millisecond {
			t.Fatalf("waits %v: a zero Backoff waited less than half its default second", waits)
		}
	}
	if len(waits) != 2 {
		t.Fatalf("waits %v, want 2", waits)
	}
}
