package audit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A tailer far behind holds at most its bound and one watch response
// (etcd sends at most 1000 revisions in one) while the store is slow, and
// still stores every revision once: the watch it cancels at the bound is
// watched again from the revision after the last it read. Without the
// bound (the variant kept here to show the test can fail) it holds the
// whole backlog.
func TestACatchUpHoldsAtMostItsBound(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 90*time.Second)
	const backlog, bound, response = 5000, 1500, 1000
	first, last := putBacklog(t, ctx, env.Etcd, "team-a/feed", backlog)

	for _, c := range []struct {
		name  string
		limit int64
	}{{"unbounded", -1}, {"bounded", bound}} {
		t.Run(c.name, func(t *testing.T) {
			store := &gatedStore{Store: audittest.New(), gate: make(chan struct{}), asked: make(chan struct{})}
			m := audit.NewMetrics(nil)
			cluster := "coord-" + c.name // its own election and checkpoint
			tctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				audit.Run(tctx, audit.Config{Cluster: cluster, Etcd: env.Etcd, Coord: env.Etcd, Store: store, Name: "t",
					Metrics: m, MaxPendingEvents: c.limit})
			}()
			defer func() { cancel(); <-done }()
			// The store answers nothing until the tailer has read all it
			// will: the whole backlog, or its bound.
			if err := await(ctx, store.asked); err != nil {
				t.Fatal(err)
			}
			want := int64(backlog)
			if c.limit > 0 {
				want = bound
			}
			awaitPeak(t, ctx, m, cluster, want)
			if c.limit > 0 {
				// Nothing to wait for: this is the time it would take to
				// read on past the bound, were it to.
				time.Sleep(300 * time.Millisecond)
			}
			peak := m.PendingPeak(cluster)
			close(store.gate)
			err := store.Await(ctx, func(evs []audit.Event) bool {
				return len(evs) > 0 && evs[len(evs)-1].Revision >= last
			})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			for _, e := range store.Events() {
				if e.Kind == audit.Grant && e.Revision >= first && e.Revision <= last {
					seen[e.Revision]++
				}
			}
			for rev := first; rev <= last; rev++ {
				if seen[rev] != 1 {
					t.Fatalf("revision %d stored %d times, want once", rev, seen[rev])
				}
			}
			if store.Replays != 0 {
				t.Errorf("%d events stored twice: a window was read again", store.Replays)
			}
			t.Logf("%s: held at most %d events of a backlog of %d", c.name, peak, backlog)
			over := peak > bound+response
			switch {
			case c.limit > 0 && over:
				t.Errorf("held %d events at once, more than the bound %d and one response (%d)", peak, bound, response)
			case c.limit < 0 && !over:
				t.Errorf("without the bound it held only %d events: this test cannot tell the bound works", peak)
			}
		})
	}
}

// putBacklog writes n holds under prefix, one revision each, and returns
// the first and last revisions.
func putBacklog(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, n int) (first, last int64) {
	t.Helper()
	var mu sync.Mutex
	first = 1 << 62
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				resp, err := cli.Put(ctx, fmt.Sprintf("/l/%s/%d", prefix, i), `{"identity":"backlog","instance":"b","class":"fast"}`)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				first, last = min(first, resp.Header.Revision), max(last, resp.Header.Revision)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if last-first+1 != int64(n) {
		t.Fatalf("backlog spans revisions %d to %d, want %d revisions", first, last, n)
	}
	return first, last
}

// awaitPeak returns once the tailer has held at least n events at once.
// The peak announces no change: it is read every 10 ms.
func awaitPeak(t *testing.T, ctx context.Context, m *audit.Metrics, cluster string, n int64) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for m.PendingPeak(cluster) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("held at most %d events, never %d", m.PendingPeak(cluster), n)
		case <-tick.C:
		}
	}
}

// gatedStore answers no insert until gate closes; asked closes at the
// first.
type gatedStore struct {
	*audittest.Store
	gate, asked chan struct{}
	once        sync.Once
}

func (s *gatedStore) Insert(ctx context.Context, evs []audit.Event) error {
	s.once.Do(func() { close(s.asked) })
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Insert(ctx, evs)
}
