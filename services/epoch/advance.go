package epoch

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Change is one epoch advance of a cluster.
type Change struct {
	// Cluster names the cluster on the coord cluster's allocation records
	// (the coord cluster's own name, or an entity shard's).
	Cluster string
	// Expected is the epoch being replaced; 0 when the cluster has no
	// record (a new cluster, or one rebuilt empty or whose record was
	// deleted).
	Expected uint32
	// Floor is an epoch the new one must exceed besides every epoch the
	// coord cluster has recorded (a moved range's source shards).
	Floor uint32
	// MapVersion stamps a cluster that had no record, or whose record is
	// bound to another cluster ID (restored); a cluster with its own
	// record keeps its version.
	MapVersion int64
	Reason     string
}

// Advanced is the outcome of Advance.
type Advanced struct {
	State
	Previous                     uint32
	DeletedHolds, DeletedWaiters int64
	Revision                     int64
}

// Advance moves a cluster (target) from c.Expected to an epoch allocated on
// the coord cluster, binds it to the cluster ID target reports now and
// deletes every hold and waiter there, in one transaction on target that
// compares the record it replaces (or its absence). It returns ErrChanged
// if the record is not the one expected. target may be coord itself.
func Advance(ctx context.Context, coord, target clientv3.KV, c Change) (Advanced, error) {
	resp, err := target.Get(ctx, lockkey.EpochKey)
	if err != nil {
		return Advanced{}, err
	}
	// What is replaced: the record, or its absence. An unreadable record
	// counts as none (the arbiter seals on it as on a missing one) and is
	// compared byte for byte.
	var cur *State
	cmp := clientv3.Compare(clientv3.CreateRevision(lockkey.EpochKey), "=", 0)
	if len(resp.Kvs) > 0 {
		cmp = clientv3.Compare(clientv3.Value(lockkey.EpochKey), "=", string(resp.Kvs[0].Value))
		if st, err := Decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision); err == nil {
			cur = &st
		}
	}
	switch {
	case cur == nil && c.Expected != 0:
		return Advanced{}, fmt.Errorf("%w: cluster %s: expected epoch %d, but it has no (readable) epoch record: expect 0", ErrChanged, c.Cluster, c.Expected)
	case cur != nil && cur.Epoch != c.Expected:
		return Advanced{}, fmt.Errorf("%w: cluster %s: expected epoch %d, found %d", ErrChanged, c.Cluster, c.Expected, cur.Epoch)
	}
	floor, mapVersion := c.Floor, c.MapVersion
	if cur != nil {
		floor = max(floor, cur.Epoch)
		// A record bound to another cluster (a restore) carries the map
		// version of its snapshot's day, which the map may have left
		// since; the advance deletes every hold, so such a cluster takes
		// the version it is given, as one rebuilt empty does.
		if !cur.Sealed(resp.Header.ClusterId) || c.MapVersion == 0 {
			mapVersion = cur.MapVersion
		}
	}
	next, err := Allocate(ctx, coord, c.Cluster, floor+1)
	if err != nil {
		return Advanced{}, err
	}
	// The cluster ID comes from the read above: the cluster the transaction
	// below commits on (a restored cluster's ID never changes back).
	rec := Record{Epoch: next, ClusterID: FormatID(resp.Header.ClusterId), Since: time.Now().UTC(),
		Reason: c.Reason, MapVersion: mapVersion}
	raw, _ := json.Marshal(rec)
	txn, err := target.Txn(ctx).If(cmp).Then(
		clientv3.OpPut(lockkey.EpochKey, string(raw)),
		clientv3.OpDelete(lockkey.HoldPrefix, clientv3.WithPrefix()),
		clientv3.OpDelete(lockkey.WaitPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return Advanced{}, err
	}
	if !txn.Succeeded {
		return Advanced{}, fmt.Errorf("%w: cluster %s: its epoch record changed during the advance (another advance or a shard map stamp); read it again", ErrChanged, c.Cluster)
	}
	out := Advanced{
		State:          State{Record: rec, ModRevision: txn.Header.Revision, Raw: raw},
		DeletedHolds:   txn.Responses[1].GetResponseDeleteRange().Deleted,
		DeletedWaiters: txn.Responses[2].GetResponseDeleteRange().Deleted,
		Revision:       txn.Header.Revision,
	}
	if cur != nil {
		out.Previous = cur.Epoch
	}
	return out, nil
}

// Bootstrap gives a new cluster its first epoch, allocated on the coord
// cluster: the explicit step that `lockplane up`, `lockplane dev` and a
// shard add take, and that nothing else does. It refuses a cluster that
// has a record (ErrChanged).
func Bootstrap(ctx context.Context, coord, target clientv3.KV, cluster string, mapVersion int64) (Advanced, error) {
	return Advance(ctx, coord, target, Change{Cluster: cluster, MapVersion: mapVersion, Reason: "bootstrapped"})
}

// BootstrapRegion is a new region's bootstrap step: it anchors allocation
// on the empty coord cluster above above, then gives the coord cluster
// (named coordName) and each shard, in name order, its first epoch. It
// returns each cluster's epoch by name.
func BootstrapRegion(ctx context.Context, coord clientv3.KV, coordName string, shards map[string]clientv3.KV, above uint32) (map[string]uint32, error) {
	if _, err := Anchor(ctx, coord, above); err != nil {
		return nil, fmt.Errorf("anchor the coord cluster's epoch allocation: %w", err)
	}
	out := map[string]uint32{}
	targets := map[string]clientv3.KV{coordName: coord}
	names := []string{coordName}
	for _, name := range slices.Sorted(maps.Keys(shards)) {
		targets[name] = shards[name]
		names = append(names, name)
	}
	for _, name := range names {
		adv, err := Bootstrap(ctx, coord, targets[name], name, 0)
		if err != nil {
			return nil, fmt.Errorf("bootstrap %s's epoch: %w", name, err)
		}
		out[name] = adv.Epoch
	}
	return out, nil
}
