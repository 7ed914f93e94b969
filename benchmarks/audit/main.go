// Command audit measures the audit tailer on the embedded default with a
// real ClickHouse, in one run:
//
//	(a) catch-up: a backlog of grants and releases made with the tailer
//	    stopped, then read into ClickHouse: sustained events per second;
//	(b) live: the same traffic with the tailer running: events per second
//	    and the lag from a grant's answer to its row in ClickHouse;
//	(c) catch-up memory: a backlog of -backlog-events events written
//	    straight into etcd (Txns of 4 holds put, then deleted), read into
//	    ClickHouse twice, side by side: without the tailer's read-ahead
//	    bound (as before it had one: the watch buffers the backlog) and
//	    with its default bound. For each, the most events held read and
//	    not stored, and the peak Go heap above the heap before (sampled
//	    every 10 ms), of a child process running the tailer alone. It
//	    runs once at ClickHouse's own speed and once with each insert
//	    slowed by -slow-store per event: a store slower than etcd serves
//	    the backlog, which is when the backlog piles up.
//
// It prints a table (or JSON with -json). It never asserts a speed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/latency"
)

type result struct {
	Phase     string  `json:"phase"`
	Events    int     `json:"events"`
	Seconds   float64 `json:"seconds"`
	EventsSec float64 `json:"events_per_sec"`
	LagP50ms  float64 `json:"lag_p50_ms,omitempty"`
	LagP99ms  float64 `json:"lag_p99_ms,omitempty"`
}

func main() {
	clients := flag.Int("clients", 8, "lock clients, each its own session and keys")
	ops := flag.Int("ops", 300, "grant+release pairs per client in each phase")
	asJSON := flag.Bool("json", false, "print JSON")
	backlog := flag.Int("backlog-events", 200000, "events in the catch-up memory phase (0: skip it)")
	slowStore := flag.Duration("slow-store", 200*time.Microsecond, "catch-up memory phase: also run with each insert slowed this much per event (0: don't)")
	child := flag.Bool("tail-child", false, "internal: run one catch-up of the memory phase (its job on stdin) in this process")
	flag.Parse()
	if *child {
		tailChild(os.Stdin)
		return
	}
	if !chserver.Installed() {
		log.Fatal("ClickHouse is not installed: run make clickhouse")
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-audit-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ch, err := chserver.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Stop()
	// Open authorisation: the benchmark measures the audit path, not a policy.
	env, err := devenv.Start(ctx, devenv.Options{Dir: filepath.Join(dir, "dev"), AllowAnyWorkload: true})
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	store := &timedStore{Store: chstore.New(ch.URL(), "bench", chstore.WithCredentials(ch.Writer())), at: map[int64]time.Time{}}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	var results []result
	// (a) A backlog, then the tailer started on it.
	traffic(ctx, env, *clients, *ops, "backlog", nil)
	head := revision(ctx, env)
	start := time.Now()
	stop := runTailer(env, store)
	store.await(head)
	secs := time.Since(start).Seconds()
	results = append(results, result{Phase: "catch-up", Events: store.count(), Seconds: secs, EventsSec: float64(store.count()) / secs})

	// (b) Live: the lag of every grant, from its answer to its row.
	before := store.count()
	answered := map[int64]time.Time{}
	var mu sync.Mutex
	start = time.Now()
	traffic(ctx, env, *clients, *ops, "live", func(rev int64) {
		mu.Lock()
		answered[rev] = time.Now()
		mu.Unlock()
	})
	store.await(revision(ctx, env))
	secs = time.Since(start).Seconds()
	stop()
	var lags []time.Duration
	for rev, t := range answered {
		if at, ok := store.when(rev); ok {
			lags = append(lags, max(0, at.Sub(t)))
		}
	}
	s := latency.Summarize(lags)
	n := store.count() - before
	results = append(results, result{Phase: "live", Events: n, Seconds: secs, EventsSec: float64(n) / secs,
		LagP50ms: s.P50ms, LagP99ms: s.P99ms})

	var mems []memResult
	if *backlog > 0 {
		mems = memory(ctx, env, ch, *backlog, *slowStore)
	}

	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"phases": results, "catch_up_memory": mems})
		return
	}
	fmt.Printf("%-9s %8s %8s %10s %10s %10s\n", "phase", "events", "seconds", "events/s", "lag p50", "lag p99")
	for _, r := range results {
		lag := fmt.Sprintf("%9.1fms %9.1fms", r.LagP50ms, r.LagP99ms)
		if r.Phase == "catch-up" {
			lag = fmt.Sprintf("%11s %11s", "-", "-")
		}
		fmt.Printf("%-9s %8d %8.2f %10.0f %s\n", r.Phase, r.Events, r.Seconds, r.EventsSec, lag)
	}
	if len(mems) > 0 {
		fmt.Printf("\ncatch-up memory, backlog of %d events\n", *backlog)
		fmt.Printf("%-16s %-10s %10s %8s %10s %12s %14s\n", "store", "variant", "events", "seconds", "events/s", "held peak", "heap peak MiB")
		for _, m := range mems {
			fmt.Printf("%-16s %-10s %10d %8.2f %10.0f %12d %14.1f\n", m.Store, m.Variant, m.Events, m.Seconds, m.EventsSec, m.HeldPeak, m.HeapPeakMiB)
		}
		for i := 0; i+1 < len(mems); i += 2 {
			u, b := mems[i], mems[i+1]
			fmt.Printf("%s, unbounded/bounded: held %.1fx, heap %.2fx, time %.2fx\n", u.Store,
				float64(u.HeldPeak)/float64(b.HeldPeak), u.HeapPeakMiB/b.HeapPeakMiB, u.Seconds/b.Seconds)
		}
	}
}

// traffic runs n clients, each taking and releasing its own keys ops
// times; granted, when set, is told each grant's revision.
func traffic(ctx context.Context, env *devenv.Env, n, ops int, tag string, granted func(int64)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := lockclient.DialProfile(env.Profile, "")
			if err != nil {
				log.Fatal(err)
			}
			defer c.Close(ctx)
			s, err := c.Session(ctx, "")
			if err != nil {
				log.Fatal(err)
			}
			for j := range ops {
				h, err := s.Lock(ctx, fmt.Sprintf("team-a/%s-%d/%d", tag, i, j%16), func(*lockclient.Hold) {})
				if err != nil {
					log.Fatal(err)
				}
				if granted != nil {
					granted(h.Token().Revision())
				}
				if err := h.Release(ctx); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
}

func revision(ctx context.Context, env *devenv.Env) int64 {
	resp, err := env.Etcd.Get(ctx, "/sys/epoch")
	if err != nil {
		log.Fatal(err)
	}
	return resp.Header.Revision
}

func runTailer(env *devenv.Env, store audit.Store) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := audit.Run(ctx, audit.Config{Cluster: "coord", Etcd: env.Etcd, Store: store, Name: "bench"}); err != nil {
			log.Fatal(err)
		}
	}()
	return func() { cancel(); <-done }
}

// timedStore notes when each revision's events were stored.
type timedStore struct {
	*chstore.Store
	slow    time.Duration // added to each insert per event
	mu      sync.Mutex
	at      map[int64]time.Time
	n       int
	last    int64
	changed chan struct{}
}

func (s *timedStore) Insert(ctx context.Context, evs []audit.Event) error {
	t0 := time.Now()
	if s.slow > 0 {
		// A slower store, simulated: the point is a store slower than
		// etcd serves the backlog.
		time.Sleep(time.Duration(len(evs)) * s.slow)
	}
	if err := s.Store.Insert(ctx, evs); err != nil {
		return err
	}
	now := time.Now()
	if os.Getenv("DEBUG_AUDIT") != "" {
		log.Printf("insert %d events in %s", len(evs), now.Sub(t0))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		if _, ok := s.at[e.Revision]; !ok {
			s.at[e.Revision] = now
		}
		s.last = max(s.last, e.Revision)
	}
	s.n += len(evs)
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return nil
}

func (s *timedStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *timedStore) when(rev int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[rev]
	return t, ok
}

// await returns once events at or past rev are stored.
func (s *timedStore) await(rev int64) {
	for {
		s.mu.Lock()
		if s.last >= rev {
			s.mu.Unlock()
			return
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		<-ch
	}
}
