// Package epoch keeps the epoch record, /sys/epoch: the epoch that tops every
// fencing token and the etcd cluster ID it was minted for (ADR-03).
//
// A restore always produces a new cluster ID, so a cluster whose ID differs
// from its record is a restored one: it is sealed, and serves no grant until
// Advance moves the epoch on, binds it to the new ID and deletes every hold
// and waiter in one transaction. Tokens minted after the advance exceed every
// token of the earlier epoch, whatever the restored revision.
package epoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/token"
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

// Ensure reads the record, creating epoch 1 bound to the cluster's ID if the
// cluster has none. Creation is one transaction guarded on absence, so any
// number of arbiters starting at once agree on one record.
func Ensure(ctx context.Context, kv clientv3.KV) (State, error) {
	for {
		st, found, err := Read(ctx, kv)
		if err != nil || found {
			return st, err
		}
		resp, err := kv.Get(ctx, lockkey.EpochKey)
		if err != nil {
			return State{}, err
		}
		rec := Record{Epoch: 1, ClusterID: FormatID(resp.Header.ClusterId), Since: time.Now().UTC(), Reason: "created"}
		raw, _ := json.Marshal(rec)
		if _, err := kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(lockkey.EpochKey), "=", 0)).
			Then(clientv3.OpPut(lockkey.EpochKey, string(raw))).Commit(); err != nil {
			return State{}, err
		}
		// Read back whichever arbiter's record won.
	}
}

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
		return State{}, fmt.Errorf("epoch: %s is not an epoch record: %w", lockkey.EpochKey, err)
	}
	if rec.Epoch == 0 || rec.Epoch > token.MaxEpoch || rec.ClusterID == "" {
		return State{}, fmt.Errorf("epoch: %s holds an invalid record (epoch %d, cluster %q)", lockkey.EpochKey, rec.Epoch, rec.ClusterID)
	}
	return State{Record: rec, ModRevision: modRev, Raw: raw}, nil
}

// Advanced is the outcome of Advance.
type Advanced struct {
	State
	DeletedHolds, DeletedWaiters int64
	Revision                     int64
}

// Advance moves the epoch from expected to expected+1, bound to the cluster
// ID etcd reports now, and deletes every hold and waiter, in one
// transaction. It returns ErrChanged if the epoch is not expected.
func Advance(ctx context.Context, kv clientv3.KV, expected uint32, reason string) (Advanced, error) {
	return AdvanceAbove(ctx, kv, expected, 0, reason)
}

// AdvanceAbove is Advance to an epoch above floor as well as above
// expected: a shard that receives keys from others first moves above each
// source's epoch, so tokens never go backwards across a move (ADR-09).
func AdvanceAbove(ctx context.Context, kv clientv3.KV, expected, floor uint32, reason string) (Advanced, error) {
	cur, found, err := Read(ctx, kv)
	if err != nil {
		return Advanced{}, err
	}
	if !found || cur.Epoch != expected {
		return Advanced{}, fmt.Errorf("%w: expected epoch %d, found %d", ErrChanged, expected, cur.Epoch)
	}
	if max(expected, floor) >= token.MaxEpoch {
		return Advanced{}, fmt.Errorf("epoch: epoch %d is the last a token can carry", expected)
	}
	// The cluster ID comes from the response to the read above: the cluster
	// the transaction below will commit on.
	hdr, err := kv.Get(ctx, lockkey.EpochKey, clientv3.WithCountOnly())
	if err != nil {
		return Advanced{}, err
	}
	next := Record{Epoch: max(expected, floor) + 1, ClusterID: FormatID(hdr.Header.ClusterId), Since: time.Now().UTC(),
		Reason: reason, MapVersion: cur.MapVersion}
	raw, _ := json.Marshal(next)
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lockkey.EpochKey), "=", string(cur.Raw))).
		Then(
			clientv3.OpPut(lockkey.EpochKey, string(raw)),
			clientv3.OpDelete(lockkey.HoldPrefix, clientv3.WithPrefix()),
			clientv3.OpDelete(lockkey.WaitPrefix, clientv3.WithPrefix()),
		).Commit()
	if err != nil {
		return Advanced{}, err
	}
	if !resp.Succeeded {
		return Advanced{}, fmt.Errorf("%w: another advance committed first", ErrChanged)
	}
	return Advanced{
		State:          State{Record: next, ModRevision: resp.Header.Revision, Raw: raw},
		DeletedHolds:   resp.Responses[1].GetResponseDeleteRange().Deleted,
		DeletedWaiters: resp.Responses[2].GetResponseDeleteRange().Deleted,
		Revision:       resp.Header.Revision,
	}, nil
}

// Stamp records the shard map version this cluster now serves under,
// keeping the epoch. Rewriting the record changes its revision, so every
// grant in flight under the previous version fails its compare.
func Stamp(ctx context.Context, kv clientv3.KV, mapVersion int64) (State, error) {
	cur, err := Ensure(ctx, kv)
	if err != nil {
		return State{}, err
	}
	if cur.MapVersion == mapVersion {
		return cur, nil
	}
	next := cur.Record
	next.MapVersion, next.Reason = mapVersion, fmt.Sprintf("shard map version %d", mapVersion)
	raw, _ := json.Marshal(next)
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lockkey.EpochKey), "=", string(cur.Raw))).
		Then(clientv3.OpPut(lockkey.EpochKey, string(raw))).Commit()
	if err != nil {
		return State{}, err
	}
	if !resp.Succeeded {
		return State{}, fmt.Errorf("%w: changed while stamping map version %d", ErrChanged, mapVersion)
	}
	return State{Record: next, ModRevision: resp.Header.Revision, Raw: raw}, nil
}

// HighestPrefix is where the coord cluster records, per entity shard, the
// highest epoch the shard has reached. A shard restored from a snapshot
// older than its last advance cannot tell it from its own record.
const HighestPrefix = "/sys/epochs/"

// Highest is the highest epoch recorded for cluster on the coord cluster
// kv; 0 if none is.
func Highest(ctx context.Context, kv clientv3.KV, cluster string) (uint32, error) {
	resp, err := kv.Get(ctx, HighestPrefix+cluster)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	e, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("epoch: %s%s: %w", HighestPrefix, cluster, err)
	}
	return uint32(e), nil
}

// NoteHighest records that cluster has reached epoch e, unless a higher
// epoch is recorded already.
func NoteHighest(ctx context.Context, kv clientv3.KV, cluster string, e uint32) error {
	key := HighestPrefix + cluster
	for {
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return err
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) > 0 {
			cur, _ := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 32)
			if uint32(cur) >= e {
				return nil
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		put, err := kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, strconv.FormatUint(uint64(e), 10))).Commit()
		if err != nil || put.Succeeded {
			return err
		}
	}
}
