package epoch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/etcdembed"
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

// Arbiters starting together on an empty cluster agree on one record.
func TestEnsureCreatesOneRecordUnderRace(t *testing.T) {
	cli := cluster(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	states := make([]epoch.State, 8)
	for i := range states {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, err := epoch.Ensure(ctx, cli)
			if err != nil {
				t.Error(err)
			}
			states[i] = st
		}(i)
	}
	wg.Wait()
	for _, st := range states[1:] {
		if st.ModRevision != states[0].ModRevision || st.Epoch != 1 {
			t.Fatalf("arbiters saw different records: %+v vs %+v", st, states[0])
		}
	}
	resp, _ := cli.Get(ctx, lockkey.EpochKey)
	if resp.Kvs[0].Version != 1 {
		t.Fatalf("the record was written %d times, want once", resp.Kvs[0].Version)
	}
	if states[0].Sealed(resp.Header.ClusterId) {
		t.Fatal("a fresh cluster is sealed")
	}
}

func TestAdvanceIsOneConditionalTxn(t *testing.T) {
	cli := cluster(t)
	ctx := context.Background()
	st, _ := epoch.Ensure(ctx, cli)
	cli.Put(ctx, lockkey.HoldKey("team-a/x"), "h")
	cli.Put(ctx, lockkey.WaitPrefix+"team-a/x/1", "w")
	cli.Put(ctx, "/s/keep", "session") // not a hold: survives
	adv, err := epoch.Advance(ctx, cli, st.Epoch, "test")
	if err != nil {
		t.Fatal(err)
	}
	if adv.Epoch != 2 || adv.DeletedHolds != 1 || adv.DeletedWaiters != 1 {
		t.Fatalf("advance: %+v", adv)
	}
	if kept, _ := cli.Get(ctx, "/s/keep"); len(kept.Kvs) != 1 {
		t.Fatal("advance deleted outside /l and /q")
	}
	// A second advance from the old epoch is refused and changes nothing.
	if _, err := epoch.Advance(ctx, cli, st.Epoch, "stale"); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("advance from a stale epoch: %v, want ErrChanged", err)
	}
	now, _, _ := epoch.Read(ctx, cli)
	if now.Epoch != 2 || now.ModRevision != adv.ModRevision {
		t.Fatalf("record after the refused advance: %+v", now)
	}
}
