package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/election"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func etcd(t *testing.T) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cli, err := clientv3.New(c.ClientConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func elected(cli *clientv3.Client, name string, ttl time.Duration) election.Election {
	return election.Election{Coord: cli, Prefix: "/test/leader", Name: name, TTL: ttl, OpTimeout: 5 * time.Second}
}

// A second instance waits while the first leads, and leads as soon as the
// first stops: the stopped one revokes its lease rather than let it lapse.
func TestOneLeadsAtATimeAndHandsOverWhenItStops(t *testing.T) {
	cli := etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leading := make(chan string, 2)
	var mu sync.Mutex
	running, most := 0, 0
	lead := func(name string) func(context.Context, clientv3.Cmp) error {
		return func(lctx context.Context, _ clientv3.Cmp) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			defer func() { mu.Lock(); running--; mu.Unlock() }()
			leading <- name
			<-lctx.Done()
			return nil
		}
	}
	ctxs := map[string]context.CancelFunc{}
	done := map[string]chan error{}
	for _, name := range []string{"a", "b"} {
		ectx, stop := context.WithCancel(ctx)
		ctxs[name], done[name] = stop, make(chan error, 1)
		// A TTL far above the test's waits: a hand-over seen in time
		// came from the revoke, not from the lease lapsing.
		go func() { done[name] <- elected(cli, name, time.Minute).Lead(ectx, lead(name)) }()
	}
	first := <-leading
	select {
	case other := <-leading:
		t.Fatalf("%s led while %s did", other, first)
	case <-time.After(500 * time.Millisecond):
	}
	ctxs[first]()
	if err := <-done[first]; err != nil {
		t.Fatalf("the stopped leader returned %v, want nil", err)
	}
	select {
	case second := <-leading:
		if second == first {
			t.Fatalf("%s led again after it stopped", first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no hand-over within 10 s of the leader stopping (the election TTL is 60 s)")
	}
	for _, stop := range ctxs {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("%d leaders at once, want 1", most)
	}
}

// A leader whose lease is lost is deposed: f's context ends, and Lead
// returns ErrDeposed. Run then waits its backoff, says why the term ended,
// and campaigns again.
func TestRunCampaignsAgainAfterItIsDeposed(t *testing.T) {
	cli := etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	var waits []time.Duration
	b := election.Backoff{Min: time.Second, Max: 8 * time.Second, After: func(d time.Duration) <-chan time.Time {
		waits = append(waits, d)
		ch := make(chan time.Time, 1)
		ch <- time.Now()
		return ch
	}}
	var ends []error
	terms := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A short TTL: the keepalive, every third of it, finds the
		// lease gone.
		elected(cli, "a", 3*time.Second).Run(rctx, b, func(lctx context.Context, leader clientv3.Cmp) error {
			if terms++; terms == 2 {
				stop()
				return nil
			}
			// Depose it behind its back: its lease goes.
			resp, err := cli.Get(lctx, "/test/leader", clientv3.WithPrefix())
			if err != nil || len(resp.Kvs) != 1 {
				t.Errorf("election keys %v, %v", resp, err)
				return nil
			}
			if _, err := cli.Revoke(lctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Errorf("revoke: %v", err)
				return nil
			}
			<-lctx.Done()
			// Its compare no longer holds: a deposed leader writes nothing.
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if r, err := cli.Txn(wctx).If(leader).Then(clientv3.OpPut("/test/by-leader", "x")).Commit(); err != nil || r.Succeeded {
				t.Errorf("a deposed leader's write: %v, %v; want it refused by the compare", r, err)
			}
			return errors.New("f's own error, hidden by the deposition")
		}, func(err error) { ends = append(ends, err) })
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Run did not return after its context ended")
	}
	if terms != 2 {
		t.Fatalf("%d terms, want 2 (deposed, then elected again)", terms)
	}
	if len(ends) != 1 || !errors.Is(ends[0], election.ErrDeposed) {
		t.Fatalf("terms ended with %v, want one ErrDeposed (the second ended with the context)", ends)
	}
	if len(waits) != 1 || waits[0] < b.Min/2 || waits[0] > b.Min {
		t.Fatalf("waited %v between terms, want one wait of Min, jittered", waits)
	}
}
