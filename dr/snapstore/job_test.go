package snapstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/resourcetest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// timer is a job's clock: each wait the job asks for is sent on asked,
// and fires only when the test says.
type timer struct{ asked chan wait }

type wait struct {
	d    time.Duration
	fire chan time.Time
}

func newTimer() *timer { return &timer{asked: make(chan wait, 16)} }

func (t *timer) After(d time.Duration) <-chan time.Time {
	w := wait{d: d, fire: make(chan time.Time, 1)}
	t.asked <- w
	return w.fire
}

func (t *timer) next(tb testing.TB, ctx context.Context, what string) wait {
	tb.Helper()
	select {
	case w := <-t.asked:
		return w
	case <-ctx.Done():
		tb.Fatalf("no wait asked for: %s", what)
	}
	return wait{}
}

func receive[T any](tb testing.TB, ctx context.Context, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		tb.Fatalf("not received: %s", what)
	}
	var zero T
	return zero
}

// Two instances of the snapshot job on one cluster take one snapshot per
// period between them: the elected one snapshots at once (none taken
// yet) and then waits a period; the other waits in the election and,
// elected when the first stops, keeps the schedule instead of
// snapshotting again at once.
func TestTheSnapshotJobIsOneScheduleAcrossItsInstances(t *testing.T) {
	ctx, c, cli := region(t)
	mio := resourcetest.StartMinIO(t)
	v := keyed(snapstore.Store{Client: mio.Client(t), Region: "local"})
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	const every = time.Hour
	taken := make(chan snapshot.Manifest, 4)
	recorded := map[string]chan time.Time{"member-a": make(chan time.Time, 4), "member-b": make(chan time.Time, 4)}
	job := func(name string, clock *timer) snapshot.Job {
		return snapshot.Job{
			Source: snapshot.Source{Region: "local", Cluster: snapshot.CoordCluster,
				Config: clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}},
			Etcd: cli, Store: v, Name: name, Every: every, Dir: filepath.Join(t.TempDir(), name), After: clock.After,
			Taken: func(m snapshot.Manifest, err error) {
				if err != nil {
					t.Errorf("%s: snapshot: %v", name, err)
					return
				}
				taken <- m
			},
			Recorded: func(last time.Time) { recorded[name] <- last },
		}
	}
	clockA, clockB := newTimer(), newTimer()
	ctxA, stopA := context.WithCancel(ctx)
	doneA := make(chan struct{})
	go func() { defer close(doneA); job("member-a", clockA).Run(ctxA) }()
	first := receive(t, ctx, taken, "member-a's first snapshot")
	if w := clockA.next(t, ctx, "a period after the first snapshot"); w.d < every-time.Minute {
		t.Fatalf("after a snapshot the job waits %s, want about %s", w.d, every)
	}
	ctxB, stopB := context.WithCancel(ctx)
	defer stopB()
	go job("member-b", clockB).Run(ctxB)
	stopA()
	<-doneA
	// member-b is elected now: it must wait out the period member-a began,
	// and says meanwhile how old the cluster's newest snapshot is (its
	// metric would otherwise read "never" until its own first one).
	w := clockB.next(t, ctx, "member-b's wait once elected")
	if last := receive(t, ctx, recorded["member-b"], "the snapshot member-b found recorded"); last.Sub(first.TakenAt).Abs() > time.Second {
		t.Fatalf("member-b reported the last snapshot at %s, want member-a's at %s", last, first.TakenAt)
	}
	if w.d < every-5*time.Minute {
		t.Fatalf("the successor waits %s after a snapshot taken just now, want most of %s", w.d, every)
	}
	select {
	case m := <-taken:
		t.Fatalf("the successor snapshotted at once (%s), off the schedule", m.Object)
	default:
	}
	w.fire <- time.Now()
	second := receive(t, ctx, taken, "member-b's snapshot once its wait fired")
	ms, skipped, err := v.List(ctx, snapshot.CoordCluster)
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	if len(ms) != 2 || ms[0].Object != first.Object || ms[1].Object != second.Object || second.Revision < first.Revision {
		t.Fatalf("snapshot store holds %+v, want the two snapshots in order", ms)
	}
}

// failing is a snapshot store that refuses every snapshot until healed.
type failing struct {
	snapstore.Store
	down chan struct{} // closed when healed
}

func (f *failing) Put(ctx context.Context, m snapshot.Manifest, file string) (snapshot.Manifest, error) {
	select {
	case <-f.down:
		return f.Store.Put(ctx, m, file)
	default:
		return m, errors.New("snapshot store unreachable")
	}
}

// A leader whose snapshots keep failing steps down after Resign of them,
// so another member's host, whose snapshot store path may work, takes over; each
// failure is reported and retried, never skipped silently.
func TestALeaderWhoseSnapshotsKeepFailingStepsDown(t *testing.T) {
	ctx, c, cli := region(t)
	mio := resourcetest.StartMinIO(t)
	v := keyed(snapstore.Store{Client: mio.Client(t), Region: "step-down"})
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	broken := &failing{Store: v, down: make(chan struct{})}
	healthy := &failing{Store: v, down: make(chan struct{})}
	close(healthy.down)
	type outcome struct {
		who string
		m   snapshot.Manifest
		err error
	}
	taken := make(chan outcome, 16)
	job := func(name string, store snapshot.Store, clock *timer) snapshot.Job {
		return snapshot.Job{
			Source: snapshot.Source{Region: "step-down", Cluster: snapshot.CoordCluster,
				Config: clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}},
			Etcd: cli, Store: store, Name: name, Every: time.Hour, Dir: filepath.Join(t.TempDir(), name), After: clock.After, Resign: 3,
			Taken: func(m snapshot.Manifest, err error) { taken <- outcome{name, m, err} },
		}
	}
	clockA, clockB := newTimer(), newTimer()
	go job("member-a", broken, clockA).Run(ctx)
	if o := receive(t, ctx, taken, "member-a's first attempt"); o.who != "member-a" || o.err == nil {
		t.Fatalf("first attempt %+v, want member-a's failure", o)
	}
	go job("member-b", healthy, clockB).Run(ctx)
	for i := 2; i <= 3; i++ {
		w := clockA.next(t, ctx, "member-a's retry")
		if w.d < 10*time.Second {
			t.Fatalf("retry after %s, want at least 10 s", w.d)
		}
		w.fire <- time.Now()
		if o := receive(t, ctx, taken, "member-a's retry"); o.who != "member-a" || o.err == nil {
			t.Fatalf("attempt %d: %+v, want member-a's failure", i, o)
		}
	}
	// Third failure: member-a steps down; member-b, waiting in the
	// election, is elected and snapshots (none is recorded yet).
	if o := receive(t, ctx, taken, "member-b's snapshot after member-a stepped down"); o.who != "member-b" || o.err != nil {
		t.Fatalf("after member-a stepped down: %+v, want member-b's snapshot", o)
	}
	if ms, _, err := v.List(ctx, snapshot.CoordCluster); err != nil || len(ms) != 1 {
		t.Fatalf("snapshot store holds %d snapshots (%v), want member-b's one", len(ms), err)
	}
}
