package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/services/client/token"
	ghistory "github.com/lockplane/lockplane/test/gate/history"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// restored is the restore fault's snapshot, taken before the fault.
type restored struct {
	path     string
	manifest snapshot.Manifest
	err      error
}

// snapshotShard takes the snapshot the restore fault goes back to, of the
// shard every key is on, as the region's snapshot job would.
func (h *history) snapshotShard(ctx context.Context) {
	path := filepath.Join(h.cfg.Dir, "shard-"+shardFrom+".db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: "gate", Cluster: shardFrom, Timeout: time.Minute,
		Config: clientv3.Config{Endpoints: h.sh.clusters[shardFrom].Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, path)
	h.restore = &restored{path: path, manifest: m, err: err}
}

// restoreShard replaces the shard with a restore of the snapshot taken
// earlier in the history (a new cluster ID, its revisions back at the
// snapshot's), behind the arbiters' backs. Grants made between the
// snapshot and now carry tokens the restored shard would issue again if
// it served. The heal is the operators' advance of that shard.
func (h *history) restoreShard(ctx context.Context) func() error {
	if h.restore == nil || h.restore.err != nil {
		return func() error { return fmt.Errorf("restore: the snapshot before the fault: %v", h.restore.errOrNone()) }
	}
	return h.replaceShard(ctx, "restore", func(ctx context.Context, down func()) error {
		return h.sh.clusters[shardFrom].Restore(ctx, h.restore.path, down)
	}, nil)
}

func (r *restored) errOrNone() error {
	if r == nil {
		return fmt.Errorf("none was taken")
	}
	return r.err
}

// restoreProves checks that the history could have caught what the fault
// is about: some grant on the restored shard, made after the snapshot and
// before the restore, carried a revision above the snapshot's (a token
// the restored shard would issue again if it served unsealed); and some
// acquire on it was refused SEALED between the restore and the advance
// (else granted-while-sealed would pass with nothing asked of it).
func (h *history) restoreProves(ops []ghistory.Op) error {
	repeatable, refused := false, false
	for _, op := range ops {
		if op.Kind != ghistory.Acquire || h.clusterOf[op.Key] != shardFrom {
			continue
		}
		if op.Result == ghistory.OK && op.Return < h.faultAt && token.Token(op.Token).Revision() > h.restore.manifest.Revision {
			repeatable = true
		}
		if op.Result == ghistory.Refused && op.Reason == "SEALED" && op.Call >= h.sealedFrom && op.Return <= h.sealedTo {
			refused = true
		}
	}
	switch {
	case !repeatable:
		return fmt.Errorf("no grant between the snapshot (revision %d) and the restore: the history proves nothing about tokens after it", h.restore.manifest.Revision)
	case !refused:
		return errors.New("no acquire was refused SEALED between the restore and the advance: the history proves nothing about the seal")
	}
	return nil
}
