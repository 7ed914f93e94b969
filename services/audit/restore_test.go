package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/test/gate/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdsnap "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// shardRig is a coord cluster and an entity shard (etcd processes, one
// member each) with epoch records, for tailers of the shard.
type shardRig struct {
	t          *testing.T
	ctx        context.Context
	shard      *cluster.Cluster
	shardDir   string // the shard's members' data directories are here
	coord, cli *clientv3.Client
}

func newShardRig(t *testing.T) *shardRig {
	bin, err := filepath.Abs("../../bin/etcd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("bin/etcd: %v (make build)", err)
	}
	r := &shardRig{t: t, ctx: ctxT(t, 3*time.Minute)}
	start := func() (*cluster.Cluster, *clientv3.Client) {
		r.shardDir = t.TempDir() // the second start is the shard's
		c, err := cluster.Start(r.ctx, cluster.Config{Bin: bin, Dir: r.shardDir, Members: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cli, err := c.Client()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return c, cli
	}
	_, r.coord = start()
	r.shard, r.cli = start()
	if _, err := epoch.BootstrapRegion(r.ctx, r.coord, "coord", map[string]clientv3.KV{"entity-0": r.cli}, 0); err != nil {
		t.Fatal(err)
	}
	return r
}

// advance advances the shard's epoch, once it answers, and returns the
// record's revision.
func (r *shardRig) advance() int64 {
	r.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		actx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		var adv epoch.Advanced
		st, _, err := epoch.Read(actx, r.cli)
		if err == nil {
			adv, err = epoch.Advance(actx, r.coord, r.cli, epoch.Change{Cluster: "entity-0", Expected: st.Epoch, Reason: "test"})
		}
		cancel()
		if err == nil {
			return adv.ModRevision
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("advance entity-0: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the restored member elects itself: no event to wait on from here
	}
}

// id is the cluster ID the shard's endpoints answer with.
func (r *shardRig) id() string {
	r.t.Helper()
	sctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	resp, err := r.cli.Get(sctx, "/")
	if err != nil {
		r.t.Fatal(err)
	}
	return epoch.FormatID(resp.Header.ClusterId)
}

// snapshot saves the shard's snapshot and returns its file.
func (r *shardRig) snapshot() string {
	r.t.Helper()
	file := filepath.Join(r.t.TempDir(), "shard.db")
	if _, err := snapshot.Take(r.ctx, snapshot.Source{Region: "r", Cluster: "entity-0",
		Config: clientv3.Config{Endpoints: r.shard.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file); err != nil {
		r.t.Fatal(err)
	}
	return file
}

// tail runs a tailer of the shard into store as the arbiter's tailers
// do, again after any error, until the returned stop.
func (r *shardRig) tail(store audit.Store, name string, every time.Duration) (stop func()) {
	tctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tctx.Err() == nil {
			audit.Run(tctx, audit.Config{Cluster: "entity-0", Etcd: r.cli, Coord: r.coord, Store: store, Name: name, CheckpointEvery: every})
		}
	}()
	stop = func() { cancel(); <-done }
	r.t.Cleanup(stop)
	return stop
}

// advances holds once n epoch advances of cluster id are stored.
func advances(id string, n int) func([]audit.Event) bool {
	return func(evs []audit.Event) bool {
		left := n
		for _, e := range evs {
			if e.Kind == audit.EpochAdvance && e.ClusterID == id {
				left--
			}
		}
		return left <= 0
	}
}

// awaitCheckpoint returns once the shard's tailer checkpoint names cluster
// id: a tailer that starts again compares its cluster with that one.
func awaitCheckpoint(t *testing.T, r *shardRig, id string) {
	t.Helper()
	for {
		gctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		resp, err := r.coord.Get(gctx, audit.CheckpointPrefix+"entity-0")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 && strings.Contains(string(resp.Kvs[0].Value), id) {
			return
		}
		time.Sleep(50 * time.Millisecond) // the checkpoint ticks: no event to wait on
	}
}

// A shard restored in place, under a running tailer, is another revision
// space on the same endpoints: the tailer records the change as a gap and
// reads the restored cluster from its start, under its new cluster ID.
// Before, its watch resumed past the restored cluster's revisions and
// stored nothing more (or stored the new cluster's events under the old
// ID once its revisions caught up).
func TestATailerFollowsItsShardRestoredInPlace(t *testing.T) {
	r := newShardRig(t)
	oldID := r.id()
	store := audittest.New()
	r.tail(store, "t1", 50*time.Millisecond)
	if err := store.Await(r.ctx, advances(oldID, 1)); err != nil {
		t.Fatal(err)
	}
	awaitCheckpoint(t, r, oldID) // the gap is written against it
	file := r.snapshot()
	r.advance()
	r.advance()
	if err := r.shard.Restore(r.ctx, file, nil); err != nil {
		t.Fatal(err)
	}
	r.advance()
	newID := r.id()
	if newID == oldID {
		t.Fatalf("the restore kept cluster ID %s", oldID)
	}
	wctx, wcancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer wcancel()
	if err := store.Await(wctx, advances(newID, 1)); err != nil {
		t.Fatalf("no event of the restored cluster %s stored within 30s: %v; stored %+v", newID, err, store.Events())
	}
	var gap bool
	for _, e := range store.Events() {
		gap = gap || (e.Kind == audit.Gap && strings.Contains(e.Detail, "cluster ID changed from "+oldID+" to "+newID))
		if e.ClusterID != oldID && e.ClusterID != newID {
			t.Errorf("an event of cluster %s: %+v", e.ClusterID, e)
		}
	}
	if !gap {
		t.Fatalf("no gap names the change from %s to %s: %+v", oldID, newID, store.Events())
	}
}

// A shard restored in place above its old head (its revisions bumped and
// those below marked compacted, as ShardRestore does) answers the
// tailer's resumed watch with a compaction, from its new cluster ID: that
// is the cluster change, never a compaction of the old cluster. Before,
// the tailer stored a gap under the old ID claiming revisions the old
// cluster never reached, up to the restored cluster's compaction.
func TestATailerFollowsItsShardRestoredAboveItsHead(t *testing.T) {
	r := newShardRig(t)
	oldID := r.id()
	store := audittest.New()
	// A first tailer checkpoints the old cluster; the second never does
	// (an hour apart), so only its watch can see the restore.
	stop := r.tail(store, "t", 50*time.Millisecond)
	if err := store.Await(r.ctx, advances(oldID, 1)); err != nil {
		t.Fatal(err)
	}
	awaitCheckpoint(t, r, oldID)
	stop()
	r.tail(store, "t", time.Hour)

	file := r.snapshot()
	r.advance()
	head := r.advance()
	if err := store.Await(r.ctx, advances(oldID, 3)); err != nil {
		t.Fatal(err)
	}
	if err := r.shard.RestoreBumped(r.ctx, file, nil, 1000); err != nil {
		t.Fatal(err)
	}
	r.advance()
	newID := r.id()
	if newID == oldID {
		t.Fatalf("the restore kept cluster ID %s", oldID)
	}
	wctx, wcancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer wcancel()
	if err := store.Await(wctx, advances(newID, 1)); err != nil {
		t.Fatalf("no event of the restored cluster %s stored within 30s: %v; stored %+v", newID, err, store.Events())
	}
	var changed bool
	for _, e := range store.Events() {
		changed = changed || (e.Kind == audit.Gap && e.ClusterID == newID && strings.Contains(e.Detail, "cluster ID changed from "+oldID+" to "+newID))
		if e.ClusterID == oldID && e.Revision > head {
			t.Errorf("stored under the old cluster %s at revision %d, above its head %d: %+v", oldID, e.Revision, head, e)
		}
	}
	if !changed {
		t.Fatalf("no gap names the change from %s to %s: %+v", oldID, newID, store.Events())
	}
}

// restoreSameID restores the shard in place from the snapshot at file
// under its own token, member names and peer URLs, as `etcdutl snapshot
// restore` does when told to (dr/restore refuses it): the restored shard
// has the old cluster ID, and its revisions start again at the snapshot's.
func (r *shardRig) restoreSameID(file string) {
	r.t.Helper()
	for i, m := range r.shard.Members {
		r.shard.Kill(i)
		dir := filepath.Join(r.shardDir, m.Name)
		if err := os.RemoveAll(dir); err != nil {
			r.t.Fatal(err)
		}
		if err := etcdsnap.NewV3(zap.NewNop()).Restore(etcdsnap.RestoreConfig{SnapshotPath: file, Name: m.Name, OutputDataDir: dir,
			PeerURLs: []string{m.Peer}, InitialCluster: m.Name + "=" + m.Peer, InitialClusterToken: r.shard.Token()}); err != nil {
			r.t.Fatal(err)
		}
	}
	for i := range r.shard.Members {
		if err := r.shard.Restart(i); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.shard.WaitHealthy(r.ctx, time.Minute); err != nil {
		r.t.Fatal(err)
	}
}

// head is the shard's current revision.
func (r *shardRig) head() int64 {
	r.t.Helper()
	sctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	resp, err := r.cli.Get(sctx, "/", clientv3.WithCountOnly())
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.Header.Revision
}

// bumpPast writes a key outside the lock keyspace until the shard's head
// is past rev.
func (r *shardRig) bumpPast(rev int64) {
	r.t.Helper()
	for r.head() <= rev {
		pctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		_, err := r.cli.Put(pctx, "/test/bump", "x")
		cancel()
		if err != nil {
			r.t.Fatal(err)
		}
	}
}

// rewindGap is the stored gap that names a rewind of cluster id.
func rewindGap(id string) func([]audit.Event) bool {
	return func(evs []audit.Event) bool {
		for _, e := range evs {
			if e.Kind == audit.Gap && e.ClusterID == id && strings.Contains(e.Detail, "rewound") {
				return true
			}
		}
		return false
	}
}

// sameIDRestore is a shard that a tailer has read to past head, restored
// in place under its old cluster ID from a snapshot taken below head, so
// that the checkpoint's revision is ahead of the shard's.
func sameIDRestore(t *testing.T, r *shardRig, store *audittest.Store, stopBefore bool) (id string, head int64) {
	t.Helper()
	id = r.id()
	stop := r.tail(store, "t1", 50*time.Millisecond)
	if err := store.Await(r.ctx, advances(id, 1)); err != nil {
		t.Fatal(err)
	}
	file := r.snapshot()
	r.advance()
	head = r.advance()
	if err := store.Await(r.ctx, advances(id, 3)); err != nil {
		t.Fatal(err)
	}
	awaitCheckpointAt(t, r, head)
	if stopBefore {
		stop()
	}
	r.restoreSameID(file)
	if got := r.id(); got != id {
		t.Fatalf("the restore changed the cluster ID from %s to %s; the test needs it kept", id, got)
	}
	if h := r.head(); h >= head {
		t.Fatalf("the restored shard is at revision %d, not below the tailer's %d", h, head)
	}
	return id, head
}

// awaitCheckpointAt returns once the shard's tailer checkpoint is at rev
// or past it.
func awaitCheckpointAt(t *testing.T, r *shardRig, rev int64) {
	t.Helper()
	for {
		gctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		resp, err := r.coord.Get(gctx, audit.CheckpointPrefix+"entity-0")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var ck struct{ Revision int64 }
		if len(resp.Kvs) > 0 && json.Unmarshal(resp.Kvs[0].Value, &ck) == nil && ck.Revision >= rev {
			return
		}
		time.Sleep(50 * time.Millisecond) // the checkpoint ticks: no event to wait on
	}
}

// checkRewind fails t unless a gap names the rewind of cluster id, the
// old history's events up to head are as stored before the restore (none
// overwritten by the restored history's events at the same revisions),
// and an event of the restored history past head is stored: the tailer
// resumed.
func checkRewind(t *testing.T, r *shardRig, store *audittest.Store, id string, head int64, before []audit.Event) {
	t.Helper()
	wctx, wcancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer wcancel()
	if err := store.Await(wctx, rewindGap(id)); err != nil {
		t.Fatalf("no gap names the rewind of cluster %s (restored in place under the same ID below revision %d) within 30s: %v; stored %+v", id, head, err, store.Events())
	}
	r.bumpPast(head)
	next := r.advance()
	if err := store.Await(wctx, func(evs []audit.Event) bool {
		for _, e := range evs {
			if e.Kind == audit.EpochAdvance && e.Revision == next {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the restored shard's epoch advance at revision %d was not stored within 30s: %v; stored %+v", next, err, store.Events())
	}
	now := map[string]audit.Event{}
	for _, e := range store.Events() {
		now[fmt.Sprintf("%d/%s", e.Revision, e.Key)] = e
	}
	for _, e := range before {
		if got := now[fmt.Sprintf("%d/%s", e.Revision, e.Key)]; !reflect.DeepEqual(got, e) {
			t.Errorf("the event stored at revision %d was overwritten by the restored history's:\n was %+v\n now %+v", e.Revision, e, got)
		}
	}
}

// A shard restored in place under its old cluster ID (etcdutl snapshot
// restore with the old token, member names and peer URLs) rewinds its
// revisions under the running tailer, whose watch waits past them: the
// tailer records the rewind as a gap, keeps what the store has of the old
// history, and reads on once the restored shard passes it. Before, it
// said nothing: the restored history's revisions up to its checkpoint
// were skipped silently.
func TestATailerSeesItsShardRestoredUnderTheSameID(t *testing.T) {
	r := newShardRig(t)
	store := audittest.New()
	id, head := sameIDRestore(t, r, store, false)
	checkRewind(t, r, store, id, head, storedUpTo(store, head))
}

// A tailer that starts after the same-ID restore, once the restored
// shard's head has passed its checkpoint (so revisions alone say
// nothing), still sees the rewind: the event it last stored is not at its
// revision any more.
func TestATailerStartingAfterASameIDRestoreSeesTheRewind(t *testing.T) {
	r := newShardRig(t)
	store := audittest.New()
	id, head := sameIDRestore(t, r, store, true)
	before := storedUpTo(store, head)
	r.bumpPast(head + 5)
	r.tail(store, "t2", 50*time.Millisecond)
	checkRewind(t, r, store, id, head, before)
}

// storedUpTo is what store has at revisions up to head.
func storedUpTo(store *audittest.Store, head int64) []audit.Event {
	var out []audit.Event
	for _, e := range store.Events() {
		if e.Revision <= head {
			out = append(out, e)
		}
	}
	return out
}
