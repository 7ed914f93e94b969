package vault_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/vault"
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

// Two instances of the snapshot job on one cluster take one snapshot per
// period between them: the elected one snapshots at once (none taken
// yet) and then waits a period; the other waits in the election and,
// elected when the first stops, keeps the schedule instead of
// snapshotting again at once.
func TestTheSnapshotJobIsOneScheduleAcrossItsInstances(t *testing.T) {
	ctx, c, cli := region(t)
	mio := resourcetest.StartMinIO(t)
	v := vault.Vault{Client: mio.Client(t), Region: "local"}
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	const every = time.Hour
	taken := make(chan snapshot.Manifest, 4)
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
		}
	}
	clockA, clockB := newTimer(), newTimer()
	ctxA, stopA := context.WithCancel(ctx)
	doneA := make(chan struct{})
	go func() { defer close(doneA); job("member-a", clockA).Run(ctxA) }()
	first := <-taken
	if w := clockA.next(t, ctx, "a period after the first snapshot"); w.d < every-time.Minute {
		t.Fatalf("after a snapshot the job waits %s, want about %s", w.d, every)
	}
	ctxB, stopB := context.WithCancel(ctx)
	defer stopB()
	go job("member-b", clockB).Run(ctxB)
	stopA()
	<-doneA
	// member-b is elected now: it must wait out the period member-a began.
	w := clockB.next(t, ctx, "member-b's wait once elected")
	if w.d < every-5*time.Minute {
		t.Fatalf("the successor waits %s after a snapshot taken just now, want most of %s", w.d, every)
	}
	select {
	case m := <-taken:
		t.Fatalf("the successor snapshotted at once (%s), off the schedule", m.Object)
	default:
	}
	w.fire <- time.Now()
	second := <-taken
	ms, err := v.List(ctx, snapshot.CoordCluster)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Object != first.Object || ms[1].Object != second.Object || second.Revision < first.Revision {
		t.Fatalf("vault holds %+v, want the two snapshots in order", ms)
	}
}
