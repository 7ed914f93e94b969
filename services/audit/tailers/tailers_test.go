package tailers_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/audit/tailers"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
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
