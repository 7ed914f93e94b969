package epoch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func cluster(t *testing.T) *clientv3.Client {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Nothing allocates on a coord cluster that recorded nothing; once an
// operator initialises it above N, every epoch exceeds N, and concurrent
// allocations never hand out one epoch twice.
func TestAllocationStartsAboveTheOperatorsFloorAndNeverRepeats(t *testing.T) {
	coord := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Allocate(ctx, coord, "coord", 1); !errors.Is(err, epoch.ErrUninitialised) {
		t.Fatalf("allocate on an empty coord cluster: %v, want ErrUninitialised", err)
	}
	if _, err := epoch.Bootstrap(ctx, coord, coord, "coord", 0); !errors.Is(err, epoch.ErrUninitialised) {
		t.Fatalf("bootstrap on an empty coord cluster: %v, want ErrUninitialised", err)
	}
	if _, err := epoch.Anchor(ctx, coord, 41); err != nil {
		t.Fatal(err)
	}
	if _, err := epoch.Anchor(ctx, coord, 0); err == nil {
		t.Fatal("a second anchor was accepted: it could lower the floor")
	}
	adv, err := epoch.Bootstrap(ctx, coord, coord, "coord", 0)
	if err != nil || adv.Epoch != 42 || adv.Previous != 0 {
		t.Fatalf("bootstrap: %+v, %v; want epoch 42 from none", adv, err)
	}
	if _, err := epoch.Bootstrap(ctx, coord, coord, "coord", 0); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("bootstrap of a cluster with a record: %v, want ErrChanged", err)
	}
	var (
		mu   sync.Mutex
		seen = map[uint32]bool{}
		wg   sync.WaitGroup
	)
	for i := range 8 {
		wg.Go(func() {
			e, err := epoch.Allocate(ctx, coord, fmt.Sprintf("shard-%d", i%3), 1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[e] || e <= 42 {
				t.Errorf("epoch %d allocated twice or not above the coord cluster's 42", e)
			}
			seen[e] = true
		})
	}
	wg.Wait()
	rec, err := epoch.ReadRecorded(ctx, coord)
	if err != nil || rec.Highest != 50 {
		t.Fatalf("recorded: %+v, %v; want highest 50 after 8 allocations above 42", rec, err)
	}
}

// A coord cluster from before allocation records (only /sys/epoch and
// /sys/epochs/) allocates above every epoch it holds.
func TestAllocationCountsRecordsWrittenBeforeTheAllocator(t *testing.T) {
	coord := cluster(t)
	ctx := ctxT(t)
	hdr, _ := coord.Get(ctx, "x")
	rec, _ := json.Marshal(epoch.Record{Epoch: 7, ClusterID: epoch.FormatID(hdr.Header.ClusterId)})
	coord.Put(ctx, lockkey.EpochKey, string(rec))
	coord.Put(ctx, epoch.HighestPrefix+"entity-1", "9")
	if e, err := epoch.Allocate(ctx, coord, "entity-2", 1); err != nil || e != 10 {
		t.Fatalf("allocate: %d, %v; want 10", e, err)
	}
}

func TestAdvanceIsOneConditionalTxn(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	boot, err := epoch.Bootstrap(ctx, cli, cli, "c", 3)
	if err != nil || boot.Epoch != 1 || boot.MapVersion != 3 {
		t.Fatalf("bootstrap: %+v, %v", boot, err)
	}
	cli.Put(ctx, lockkey.HoldKey("team-a/x"), "h")
	cli.Put(ctx, lockkey.WaitPrefix+"team-a/x/1", "w")
	cli.Put(ctx, lockkey.ClosingPrefix+"keep", "closing") // not a hold, waiter or session: survives
	// A stamp that lands between the advance's read and its Txn: the Txn
	// compares the record it read, so it commits nothing.
	stamped := &nthTxn{KV: cli, n: 1, hook: func() {
		if _, err := epoch.Stamp(ctx, cli, 4); err != nil {
			t.Fatal(err)
		}
	}}
	if _, err := epoch.Advance(ctx, cli, stamped, epoch.Change{Cluster: "c", Expected: 1, Reason: "raced"}); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("advance racing a stamp: %v, want ErrChanged", err)
	}
	if now, _, _ := epoch.Read(ctx, cli); now.Epoch != 1 || now.MapVersion != 4 {
		t.Fatalf("record after the raced advance: %+v, want epoch 1 stamped 4", now)
	}
	adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: 1, MapVersion: 9, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if adv.Epoch != 3 || adv.Previous != 1 || adv.DeletedHolds != 1 || adv.DeletedWaiters != 1 || adv.MapVersion != 4 {
		t.Fatalf("advance: %+v (a record keeps its own map version)", adv)
	}
	if kept, _ := cli.Get(ctx, lockkey.ClosingPrefix+"keep"); len(kept.Kvs) != 1 {
		t.Fatal("advance deleted outside /l, /q and /s")
	}
	// A second advance from the old epoch is refused and changes nothing.
	if _, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: 1, Reason: "stale"}); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("advance from a stale epoch: %v, want ErrChanged", err)
	}
	now, _, _ := epoch.Read(ctx, cli)
	if now.Epoch != 3 || now.ModRevision != adv.ModRevision {
		t.Fatalf("record after the refused advance: %+v", now)
	}
}

// An allocation commits only if no allocation record changed since it read
// them: a cluster's highest noted in between is not allocated again.
func TestAllocationSeesAHighestNotedConcurrently(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	// ReadRecorded is the first Txn; the allocation's own is the second.
	raced := &nthTxn{KV: cli, n: 2, hook: func() {
		if err := epoch.NoteHighest(ctx, cli, "entity-1", 10); err != nil {
			t.Fatal(err)
		}
	}}
	e, err := epoch.Allocate(ctx, raced, "entity-2", 1)
	if err != nil || e != 11 {
		t.Fatalf("allocate racing a noted highest of 10: %d, %v; want 11", e, err)
	}
}

// nthTxn runs hook before the nth Txn through it.
type nthTxn struct {
	clientv3.KV
	n, seen int
	hook    func()
}

func (b *nthTxn) Txn(ctx context.Context) clientv3.Txn {
	if b.seen++; b.seen == b.n {
		b.hook()
	}
	return b.KV.Txn(ctx)
}

// A coord cluster restored from a snapshot carries allocation records of
// another etcd cluster: it allocates nothing until an operator anchors it
// above the region's highest epoch, and then never below that.
func TestARestoredCoordClusterAllocatesOnlyOnceAnchored(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	stale, _ := json.Marshal(map[string]any{"epoch": 5, "cluster_id": "feedbeef"})
	cli.Put(ctx, epoch.AllocKey, string(stale))
	if _, err := epoch.Allocate(ctx, cli, "entity-1", 1); !errors.Is(err, epoch.ErrCoordRestored) {
		t.Fatalf("allocate on a restored coord cluster: %v, want ErrCoordRestored", err)
	}
	rec, err := epoch.ReadRecorded(ctx, cli)
	if err != nil || rec.Anchored || !rec.Initialised || rec.Highest != 5 {
		t.Fatalf("recorded: %+v, %v", rec, err)
	}
	if _, err := epoch.Anchor(ctx, cli, 20); err != nil {
		t.Fatal(err)
	}
	if e, err := epoch.Allocate(ctx, cli, "entity-1", 1); err != nil || e != 21 {
		t.Fatalf("allocate after anchoring above 20: %d, %v; want 21", e, err)
	}
}

// An unreadable record seals the cluster as a missing one does, and the
// advance with expected 0 replaces it; values past the last epoch a token
// can carry are refused, not wrapped.
func TestUnreadableRecordsAreReplacedOrRefused(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	cli.Put(ctx, lockkey.EpochKey, "not json")
	if _, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: 1, Reason: "x"}); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("advance expecting 1 over an unreadable record: %v, want ErrChanged", err)
	}
	if adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Reason: "unreadable"}); err != nil || adv.Epoch != 1 {
		t.Fatalf("advance from an unreadable record: %+v, %v", adv, err)
	}
	cli.Put(ctx, epoch.HighestPrefix+"entity-9", "4294967295")
	if _, err := epoch.Allocate(ctx, cli, "entity-9", 1); !errors.Is(err, epoch.ErrInvalid) {
		t.Fatalf("allocate with a recorded epoch past the token's range: %v, want ErrInvalid", err)
	}
}

// A deleted record is not recreated at a low epoch: the advance from none
// allocates above every epoch the cluster had, and stamping refuses.
func TestADeletedRecordAdvancesAboveEveryEarlierEpoch(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := epoch.Bootstrap(ctx, cli, cli, "c", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: 1, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, lockkey.EpochKey); err != nil {
		t.Fatal(err)
	}
	if _, err := epoch.Stamp(ctx, cli, 4); !errors.Is(err, epoch.ErrNoRecord) {
		t.Fatalf("stamp without a record: %v, want ErrNoRecord", err)
	}
	if _, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: 2, Reason: "test"}); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("advance expecting 2 with no record: %v, want ErrChanged", err)
	}
	adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Reason: "record deleted"})
	if err != nil || adv.Epoch != 3 {
		t.Fatalf("advance from none: %+v, %v; want epoch 3", adv, err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A record bound to another cluster ID (a restore's) keeps the map
// version of its snapshot's day; the advance that unseals the cluster
// stamps the version it is given, or every grant routed to it under the
// current map would be refused MOVING. A record of its own cluster keeps
// its version (TestAdvanceIsOneConditionalTxn).
func TestARestoredRecordTakesTheMapVersionItIsGiven(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	restored, _ := json.Marshal(epoch.Record{Epoch: 2, ClusterID: "an-older-cluster", MapVersion: 1, Since: time.Now(), Reason: "bootstrapped"})
	if _, err := cli.Put(ctx, lockkey.EpochKey, string(restored)); err != nil {
		t.Fatal(err)
	}
	adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: 2, MapVersion: 3, Reason: "restored"})
	if err != nil {
		t.Fatal(err)
	}
	if adv.MapVersion != 3 || adv.Epoch <= 2 {
		t.Fatalf("advance of a restored record: %+v, want map version 3, the one given", adv.State)
	}
}
