package tailers_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/tailers"
)

// A store that is not ready yet delays the tailers, never stops them: the
// migration is tried again until it succeeds, and then every cluster is
// tailed until the context ends.
func TestTheTailersWaitForTheStoreThenTailEveryCluster(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Shards: []string{"s0"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := audittest.New()
	var tries atomic.Int32
	migrate := func(context.Context) error {
		if tries.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	tctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tailers.Run(tctx, tailers.Config{CoordName: "coord", Coord: env.Etcd, Shards: env.ShardEtcd, Store: store,
			Migrate: migrate, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	}()
	// Without a checkpoint each tailer reads its cluster from the start,
	// where the bootstrap gave it its first epoch.
	err := store.Await(ctx, func(evs []audit.Event) bool {
		var clusters []string
		for _, e := range evs {
			if !slices.Contains(clusters, e.Cluster) {
				clusters = append(clusters, e.Cluster)
			}
		}
		slices.Sort(clusters)
		return slices.Equal(clusters, []string{"coord", "s0"})
	})
	if err != nil {
		t.Fatalf("events of both clusters: %v; have %v", err, store.Events())
	}
	if n := tries.Load(); n != 3 {
		t.Fatalf("migrated %d times, want 3 (two failures, one success)", n)
	}
	stop()
	<-done
}

// archiver counts the archivers running at once; each runs until its
// context ends.
type archiver struct {
	running, most atomic.Int32
	started       chan string  // the name of each archiver that started
	bucketsFail   atomic.Int32 // Prepare fails this many more times
}

type namedArchiver struct {
	*archiver
	name string
}

func (a namedArchiver) Prepare(context.Context) error {
	if a.bucketsFail.Add(-1) >= 0 {
		return errors.New("minio is not up yet")
	}
	return nil
}

func (a namedArchiver) RunDaily(ctx context.Context, _ archive.Progress) error {
	n := a.running.Add(1)
	defer a.running.Add(-1)
	for m := a.most.Load(); n > m && !a.most.CompareAndSwap(m, n); m = a.most.Load() {
	}
	a.started <- a.name
	<-ctx.Done()
	return nil
}

// Of every process given the archive, one archives at a time, after its
// buckets are ready; when it stops, another takes over.
func TestOneProcessOfTheRegionArchives(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shared := &archiver{started: make(chan string, 4)}
	shared.bucketsFail.Store(2)
	stops := map[string]context.CancelFunc{}
	dones := map[string]chan struct{}{}
	for _, name := range []string{"p1", "p2"} {
		pctx, stop := context.WithCancel(ctx)
		stops[name], dones[name] = stop, make(chan struct{})
		go func() {
			defer close(dones[name])
			tailers.Run(pctx, tailers.Config{CoordName: "coord", Coord: env.Etcd, Store: audittest.New(), Name: name,
				Archive: namedArchiver{shared, name}, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		}()
	}
	var first string
	select {
	case first = <-shared.started:
	case <-ctx.Done():
		t.Fatal("no archiver started")
	}
	stops[first]()
	<-dones[first]
	select {
	case second := <-shared.started:
		if second == first {
			t.Fatalf("%s archived again after it stopped", first)
		}
	case <-ctx.Done():
		t.Fatalf("no archiver took over from %s", first)
	}
	if n := shared.most.Load(); n != 1 {
		t.Fatalf("%d archivers ran at once, want 1", n)
	}
	if n := shared.bucketsFail.Load(); n >= 0 {
		t.Fatalf("the buckets were tried %d times too few before archiving", n+1)
	}
	for _, stop := range stops {
		stop()
	}
	for _, done := range dones {
		<-done
	}
}
