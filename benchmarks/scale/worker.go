package main

// The client worker: a separate process (the bench binary run again with
// -worker) that opens its share of the sessions through the real client
// library, takes H holds on each, keeps them renewing, and reports how many
// holds it lost while it kept renewing. It talks to the driver over its
// stdin and stdout, one line each way per phase.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
)

// workerResult is the one JSON line a worker prints at the end.
type workerResult struct {
	Sessions int `json:"sessions"`
	Holds    int `json:"holds"`
	// Fenced are holds whose Fenced channel closed while this process was
	// alive and renewing: false expiries.
	Fenced int    `json:"fenced"`
	Err    string `json:"error,omitempty"`
}

// workerArgs is a worker's share, passed as flags.
type workerArgs struct {
	Profile    string
	Identities []string // one per session, round-robin
	Sessions   int
	// Holds is the worker's holds in all, spread round-robin over its
	// sessions (so a total that is not a multiple of Sessions works).
	Holds     int
	Class     string
	Prefix    string
	Parallel  int
	OpTimeout time.Duration
}

// runWorker opens a.Sessions sessions, says "opened", waits for "hold",
// takes a.Holds holds spread over them, says "held", waits for "stop" (or stdin's
// end), then prints its result. Every call has a deadline.
func runWorker(a workerArgs) {
	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	fail := func(err error) {
		out.Encode(workerResult{Err: err.Error()})
		os.Exit(1)
	}
	p, err := profile.Load(a.Profile)
	if err != nil {
		fail(err)
	}
	// One connection per identity; one Client (so one lease, ADR-10) per
	// session on it.
	conns := make([]*lockclient.Client, len(a.Identities))
	for i, id := range a.Identities {
		if conns[i], err = lockclient.DialProfile(p, id); err != nil {
			fail(fmt.Errorf("dial %s: %w", id, err))
		}
	}
	sessions := make([]*lockclient.Session, a.Sessions)
	err = parallel("sessions opened", a.Sessions, a.Parallel, func(i int) error {
		c := lockclient.NewFromConn(conns[i%len(conns)].Conn())
		ctx, cancel := context.WithTimeout(context.Background(), a.OpTimeout)
		defer cancel()
		s, err := c.Session(ctx, a.Class)
		if err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		sessions[i] = s
		return nil
	})
	if err != nil {
		fail(err)
	}
	fmt.Println(`{"phase":"opened"}`)
	if !in.Scan() || strings.TrimSpace(in.Text()) != "hold" {
		fail(fmt.Errorf("driver went away before the hold phase"))
	}
	holds := make([]*lockclient.Hold, a.Holds)
	err = parallel("holds taken", len(holds), a.Parallel, func(i int) error {
		s := sessions[i%a.Sessions]
		ctx, cancel := context.WithTimeout(context.Background(), a.OpTimeout)
		defer cancel()
		h, err := s.TryLock(ctx, fmt.Sprintf("%s/%d", a.Prefix, i), func(*lockclient.Hold) {})
		if err != nil {
			return fmt.Errorf("hold %d: %w", i, err)
		}
		holds[i] = h
		return nil
	})
	if err != nil {
		fail(err)
	}
	fmt.Println(`{"phase":"held"}`)
	in.Scan() // "stop", or stdin's end: the driver is done measuring
	n := 0
	for _, h := range holds {
		select {
		case <-h.Fenced():
			n++
		default:
		}
	}
	out.Encode(workerResult{Sessions: a.Sessions, Holds: len(holds), Fenced: n})
}

// parallel runs f(0..n-1) on at most k goroutines and returns the first
// error. Every 10 s it says on stderr how many are done (what), and at
// what rate, so a long setup shows progress and where it slows.
func parallel(what string, n, k int, f func(int) error) error {
	var next, done atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		last, at := int64(0), time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				d := done.Load()
				fmt.Fprintf(os.Stderr, "worker %d: %d of %d %s (%.0f/s)\n", os.Getpid(), d, n, what, float64(d-last)/now.Sub(at).Seconds())
				last, at = d, now
			}
		}
	}()
	for range max(1, k) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return first
}
