package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/election"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func noFence(*lockclient.Hold) {}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// tail runs a tailer of env's coord cluster until the returned stop, or
// until it returns by itself (on exited).
func tail(t *testing.T, env *devenv.Env, store audit.Store, name string) (stop func() error) {
	stop, _ = tailing(t, env, store, name)
	return stop
}

func tailing(t *testing.T, env *devenv.Env, store audit.Store, name string) (stop func() error, exited <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = audit.Run(ctx, audit.Config{Cluster: "coord", Etcd: env.Etcd, Store: store, Name: name, CheckpointEvery: 50 * time.Millisecond})
	}()
	stop = func() error {
		cancel()
		<-done
		return err
	}
	t.Cleanup(func() { stop() })
	return stop, done
}

// grants takes and releases n keys, returning the revision of each grant.
func grants(t *testing.T, ctx context.Context, s *lockclient.Session, prefix string, n int) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for i := range n {
		key := fmt.Sprintf("team-a/%s/%d", prefix, i)
		h, err := s.Lock(ctx, key, noFence)
		if err != nil {
			t.Fatal(err)
		}
		out[key] = h.Token().Revision()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func granted(evs []audit.Event) map[string]int64 {
	out := map[string]int64{}
	for _, e := range evs {
		if e.Kind == audit.Grant {
			out[e.Key] = e.Revision
		}
	}
	return out
}

func checkpointOf(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, audit.CheckpointPrefix+"coord")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	var ck struct{ Revision int64 }
	if err := json.Unmarshal(resp.Kvs[0].Value, &ck); err != nil {
		t.Fatal(err)
	}
	return ck.Revision
}

// A tailer stopped and started again resumes from its checkpoint: every
// grant made before, during and after its absence is stored, none lost.
func TestATailerResumesFromItsCheckpoint(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	store := audittest.New()
	stop := tail(t, env, store, "t1")
	want := grants(t, ctx, s, "before", 5)
	if err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) }); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for k, v := range grants(t, ctx, s, "away", 5) {
		want[k] = v
	}
	tail(t, env, store, "t2")
	for k, v := range grants(t, ctx, s, "after", 5) {
		want[k] = v
	}
	err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) })
	got := granted(store.Events())
	for k, rev := range want {
		if got[k] != rev {
			t.Errorf("grant of %s at revision %d: stored %d", k, rev, got[k])
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// One tailer per cluster: a second waits in the election and takes over,
// from the checkpoint, when the first stops.
func TestASecondTailerWaitsItsTurn(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	first, second := audittest.New(), audittest.New()
	stop := tail(t, env, first, "first")
	leader := observeLeader(t, ctx, env.Etcd)
	if name := <-leader; name != "first" {
		t.Fatalf("leader %q, want first", name)
	}
	tail(t, env, second, "second")
	want := grants(t, ctx, s, "one", 3)
	if err := first.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) }); err != nil {
		t.Fatal(err)
	}
	if n := len(second.Events()); n != 0 {
		t.Fatalf("the waiting tailer stored %d events while the first led", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if name := <-leader; name != "second" {
		t.Fatalf("leader %q after the first stopped, want second", name)
	}
	more := grants(t, ctx, s, "two", 3)
	if err := second.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) >= len(more) }); err != nil {
		t.Fatal(err)
	}
}

func observeLeader(t *testing.T, ctx context.Context, cli *clientv3.Client) <-chan string {
	t.Helper()
	sess, err := concurrency.NewSession(cli, concurrency.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	out := make(chan string, 8)
	go func() {
		last := ""
		for resp := range concurrency.NewElection(sess, audit.ElectionPrefix+"coord").Observe(ctx) {
			if v := string(resp.Kvs[0].Value); v != last {
				last = v
				out <- v
			}
		}
	}()
	return out
}

// A deposed tailer stops, and cannot move the checkpoint, backwards or
// at all: its writes compare its election key, which is gone.
func TestADeposedTailerStopsAndLeavesTheCheckpoint(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	store := audittest.New()
	stop, exited := tailing(t, env, store, "t1")
	want := grants(t, ctx, s, "k", 3)
	if err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) }); err != nil {
		t.Fatal(err)
	}
	// Depose it behind its back: its election key goes, its lease stays,
	// so only the checkpoint's compare can stop it (as when its lease
	// expired while it was paused, and another tailer was elected).
	resp, err := env.Etcd.Get(ctx, audit.ElectionPrefix+"coord", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election keys %v, %v", resp, err)
	}
	if _, err := env.Etcd.Delete(ctx, string(resp.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	before := checkpointOf(t, ctx, env.Etcd) // read after: a checkpoint may have been in flight
	grants(t, ctx, s, "later", 3)
	select {
	case <-exited:
		if err := stop(); !errors.Is(err, election.ErrDeposed) {
			t.Fatalf("deposed tailer returned %v, want ErrDeposed", err)
		}
	case <-ctx.Done():
		t.Fatal("the deposed tailer went on")
	}
	if after := checkpointOf(t, ctx, env.Etcd); after != before {
		t.Fatalf("checkpoint moved from %d to %d after the tailer was deposed", before, after)
	}
}

// Revisions compacted before the tailer read them are a gap event, never
// skipped silently; the tailer goes on after them.
func TestACompactedRangeIsRecordedAsAGap(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	store := audittest.New()
	stop := tail(t, env, store, "t1")
	grants(t, ctx, s, "seen", 2)
	if err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == 2 }); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ck := checkpointOf(t, ctx, env.Etcd)
	lost := grants(t, ctx, s, "lost", 2)
	resp, err := env.Etcd.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	tail(t, env, store, "t2")
	after := grants(t, ctx, s, "after", 1)
	err = store.Await(ctx, func(evs []audit.Event) bool {
		_, ok := granted(evs)["team-a/after/0"]
		return ok
	})
	if err != nil {
		t.Fatal(err)
	}
	var gaps []audit.Event
	for _, e := range store.Events() {
		if e.Kind == audit.Gap {
			gaps = append(gaps, e)
		}
	}
	if len(gaps) != 1 || gaps[0].Revision != resp.Header.Revision {
		t.Fatalf("gaps %+v; want one ending at the compaction, revision %d (checkpoint %d)", gaps, resp.Header.Revision, ck)
	}
	for k := range lost {
		if _, ok := granted(store.Events())[k]; ok {
			t.Errorf("%s was compacted away yet stored", k)
		}
	}
	_ = after
}

func raw(c *lockclient.Client) lockv1.LockServiceClient { return lockv1.NewLockServiceClient(c.Conn()) }

// A store that refuses ends the tailer's watch (nothing piles up in
// memory meanwhile); once the store answers, the refused revisions are
// read again and stored, none lost.
func TestAStoreOutageLosesNothing(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	store := audittest.New()
	tail(t, env, store, "t1")
	want := grants(t, ctx, s, "up", 2)
	if err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) }); err != nil {
		t.Fatal(err)
	}
	refused := store.FailNext(errors.New("clickhouse is down"))
	for k, v := range grants(t, ctx, s, "down", 3) {
		want[k] = v
	}
	if err := await(ctx, refused); err != nil {
		t.Fatal("the store was never asked while down")
	}
	store.Heal()
	if err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) }); err != nil {
		t.Fatalf("after the outage: %d of %d grants stored", len(granted(store.Events())), len(want))
	}
}

func await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
