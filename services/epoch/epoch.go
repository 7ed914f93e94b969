// Package epoch keeps the epoch record, /sys/epoch: the epoch that tops every
// fencing token and the etcd cluster ID it was minted for (ADR-03).
//
// A restore always produces a new cluster ID, so a cluster whose ID differs
// from its record is a restored one: it is sealed, and serves no grant until
// Advance moves the epoch on, binds it to the new ID and deletes every hold
// and waiter in one transaction. A cluster with no record at all (rebuilt
// empty, the record deleted) is sealed the same way: nothing ever creates a
// record except an advance.
//
// Every epoch is allocated from the coord cluster (alloc.go), above every
// epoch it has recorded for any cluster, so no two clusters share an epoch
// and a cluster's tokens after an advance exceed every token it issued
// before, whatever its restored or restarted revision.
package epoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Record is the stored epoch record.
type Record struct {
	Epoch     uint32    `json:"epoch"`
	ClusterID string    `json:"cluster_id"` // hex, as etcdctl prints it
	Since     time.Time `json:"since"`
	Reason    string    `json:"reason,omitempty"`
	// MapVersion is the entity shard map version this cluster serves
	// under (ADR-09); 0 on a cluster no shard map covers. Grants compare
	// the record, so a grant routed under another version cannot commit.
	MapVersion int64 `json:"map_version,omitempty"`
	// QuietUntil (UTC) is when the quiet period of an advance that ended
	// live sessions is over: until then no arbiter grants a key, because
	// a holder whose last renewal was confirmed just before the advance
	// believes it holds until that renewal's send time plus its TTL. Zero
	// (absent, as in records written before it existed) when no session
	// was ended. Arbiters compare it with their own clock: see
	// docs/epochs.md for the clock assumption.
	QuietUntil time.Time `json:"quiet_until,omitzero"`
	// Placement is the digest of where the arbiters serving this cluster
	// put keys (class.Placement): an arbiter whose registry places keys
	// otherwise grants nothing here, so a set that rehomes a prefix cannot
	// serve beside the old one. Set by an advance (which deletes every
	// hold: the moment to rehome) or, on a record without one, by the first
	// arbiter that loads it; a stamp keeps it. Absent in older records.
	Placement string `json:"placement,omitempty"`
}

// State is a record read from etcd with the revision that last changed it;
// grant transactions compare that revision to prove the epoch is current.
type State struct {
	Record
	ModRevision int64
	// Raw is the stored value, compared byte for byte by Advance.
	Raw []byte
}

// Sealed reports whether a cluster with this ID may not serve grants under
// the record.
func (s State) Sealed(clusterID uint64) bool { return s.ClusterID != FormatID(clusterID) }

// FormatID prints a cluster or member ID as etcd does.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// ErrChanged means the epoch was not the one expected.
var ErrChanged = errors.New("epoch: the epoch record changed")

// ErrNoRecord means the cluster has no epoch record: it was rebuilt empty,
// its record was deleted, or it was never bootstrapped. Nothing creates one
// implicitly; only an advance allocated from the coord cluster does.
var ErrNoRecord = errors.New("epoch: the cluster has no epoch record")

// Read reads the record; found is false when the cluster has none.
func Read(ctx context.Context, kv clientv3.KV) (st State, found bool, err error) {
	resp, err := kv.Get(ctx, lockkey.EpochKey)
	if err != nil {
		return State{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return State{}, false, nil
	}
	st, err = Decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	return st, err == nil, err
}

// Decode parses a stored record read at modRev.
func Decode(raw []byte, modRev int64) (State, error) {
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return State{}, fmt.Errorf("%w: %s is not an epoch record: %v", ErrInvalid, lockkey.EpochKey, err)
	}
	if rec.Epoch == 0 || rec.Epoch > token.MaxEpoch || rec.ClusterID == "" {
		return State{}, fmt.Errorf("%w: %s holds an invalid record (epoch %d, cluster %q)", ErrInvalid, lockkey.EpochKey, rec.Epoch, rec.ClusterID)
	}
	return State{Record: rec, ModRevision: modRev, Raw: raw}, nil
}

// Stamp records the shard map version this cluster now serves under,
// keeping the epoch. Rewriting the record changes its revision, so every
// grant in flight under the previous version fails its compare.
// A cluster without a record is not stamped (ErrNoRecord): stamping never
// creates one.
func Stamp(ctx context.Context, kv clientv3.KV, mapVersion int64) (State, error) {
	cur, found, err := Read(ctx, kv)
	if err != nil {
		return State{}, err
	}
	if !found {
		return State{}, ErrNoRecord
	}
	if cur.MapVersion == mapVersion {
		return cur, nil
	}
	next := cur.Record
	next.MapVersion, next.Reason = mapVersion, fmt.Sprintf("shard map version %d", mapVersion)
	return rewrite(ctx, kv, cur, next, fmt.Sprintf("map version %d", mapVersion))
}

// rewrite replaces the record cur with next in one Txn that compares
// cur's bytes: ErrChanged when the record changed since cur was read.
func rewrite(ctx context.Context, kv clientv3.KV, cur State, next Record, what string) (State, error) {
	raw, _ := json.Marshal(next)
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lockkey.EpochKey), "=", string(cur.Raw))).
		Then(clientv3.OpPut(lockkey.EpochKey, string(raw))).Commit()
	if err != nil {
		return State{}, err
	}
	if !resp.Succeeded {
		return State{}, fmt.Errorf("%w: changed while stamping %s", ErrChanged, what)
	}
	return State{Record: next, ModRevision: resp.Header.Revision, Raw: raw}, nil
}

// Place stamps placement into cur, a record that has none, keeping
// everything else, with one Txn that compares cur's bytes: it returns
// ErrChanged when the record changed since cur was read (read it again).
// Only a record without a placement is stamped: a placement changes only
// by an advance.
func Place(ctx context.Context, kv clientv3.KV, cur State, placement string) (State, error) {
	if cur.Placement != "" {
		return State{}, fmt.Errorf("%w: the record already has placement %s; only an advance changes it", ErrChanged, cur.Placement)
	}
	next := cur.Record
	next.Placement = placement
	return rewrite(ctx, kv, cur, next, "placement "+placement)
}
