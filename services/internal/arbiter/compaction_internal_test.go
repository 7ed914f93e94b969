package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A waiter whose watch would start at a compacted revision is cancelled by
// etcd; it must retry its grant Txn at once and watch again from that
// Txn's revision (ADR-15), not sit out the poll interval.
func TestWaiterRetriesAtOnceWhenItsWatchIsCompacted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := oneMember(t, ctx)
	reg := prometheus.NewRegistry()
	// With a poll of an hour, only the compaction path can wake the waiter
	// before the test's deadline.
	a, err := New(Config{Etcd: cli, PollInterval: time.Hour, Metrics: reg, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	const key = "team-a/compacted/1"
	holder, _ := cli.Grant(ctx, 60)
	put, err := cli.Put(ctx, lockkey.HoldKey(key), `{"identity":"spiffe://t/holder"}`, clientv3.WithLease(holder.ID))
	if err != nil {
		t.Fatal(err)
	}
	refusedAt := put.Header.Revision
	for i := 0; i < 5; i++ {
		cli.Put(ctx, "/unrelated", "x")
	}
	now, _ := cli.Get(ctx, "/unrelated")
	if _, err := cli.Compact(ctx, now.Header.Revision); err != nil {
		t.Fatal(err)
	}

	id := spiffeid.RequireFromString("spiffe://t/waiter")
	cls := class.Default
	lease, _ := cli.Grant(ctx, 60)
	cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)), sessionFor(id, cls.TTL, "").Encode(), clientv3.WithLease(lease.ID))
	r := request{caller: id, key: key, class: cls, labels: labels{namespace: "team-a", class: cls.Name, tier: string(cls.Tier), cluster: "default"}}

	// The retry is the event: the head watches again after its attempt.
	rewatch := make(chan int64, 1)
	a.hooks.Store(&testHooks{Watching: func(_ string, _ int64, rev int64) {
		select {
		case rewatch <- rev:
		default:
		}
	}})
	got := make(chan error, 1)
	go func() {
		_, err := a.wait(ctx, r, int64(lease.ID), refusedAt)
		got <- err
	}()
	select {
	case <-rewatch:
	case err := <-got:
		t.Fatalf("the wait ended before a retry: %v", err)
	case <-ctx.Done():
		t.Fatal("no retry after the compacted watch")
	}
	if n := attempts(t, reg); n != 1 {
		t.Fatalf("%v grant attempts after the compacted watch, want 1", n)
	}
	// The re-watch is live: a release now wakes it and it is granted.
	if _, err := cli.Revoke(ctx, holder.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := attempts(t, reg); n != 2 {
		t.Fatalf("%v grant attempts in all, want 2", n)
	}
}

func attempts(t *testing.T, reg *prometheus.Registry) float64 {
	return sum(t, reg, "lockplane_grant_attempts_total")
}

func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
