package epoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The coord cluster's allocation records (ADR-03). AllocKey holds the last
// epoch allocated to any cluster of the region and the coord cluster ID it
// was allocated on; HighestPrefix+NAME the highest epoch allocated to (or
// seen on) cluster NAME. An allocation exceeds all of them and the coord
// cluster's own record, so no two clusters are given one epoch and no
// cluster is given an epoch at or below one it had, as long as the records
// are the coord cluster's own: a coord cluster restored from a snapshot
// has a new cluster ID, so its records may predate allocations it made,
// and it allocates nothing until an operator anchors it above them.
const (
	AllocKey      = "/sys/epoch-alloc"
	HighestPrefix = "/sys/epochs/"
)

// ErrUninitialised means the coord cluster holds no epoch records at all:
// a new region, or a coord cluster rebuilt empty. Only an operator can tell
// which, and so name the epoch to start above (Anchor).
var ErrUninitialised = errors.New("epoch: the coord cluster has no epoch records: it is new or was rebuilt empty; " +
	"an operator must anchor it above the highest epoch the region served " +
	"(lockctl epoch advance --expected 0 --above N --reason ...; see docs/epochs.md)")

// ErrCoordRestored means the coord cluster's allocation record was written
// on another etcd cluster: this one was restored from a snapshot, whose
// records may predate epochs allocated since.
var ErrCoordRestored = errors.New("epoch: the coord cluster's epoch allocation record was written by another etcd cluster: " +
	"it was restored from a snapshot and may have allocated epochs since; an operator must anchor it above the highest epoch " +
	"the region served (lockctl epoch advance --expected E --above N --reason ...; see docs/epochs.md)")

// ErrInvalid wraps every refusal that is about the records' content, not
// about reaching etcd: an unreadable record, an epoch past the last a
// token can carry.
var ErrInvalid = errors.New("epoch: invalid")

// allocRecord is AllocKey's value.
type allocRecord struct {
	Epoch     uint32 `json:"epoch"`
	ClusterID string `json:"cluster_id"`
}

// Recorded is what the coord cluster has recorded of epochs, read at one
// revision.
type Recorded struct {
	// Highest is the highest epoch recorded anywhere: the allocation
	// record, any cluster's highest, the coord cluster's own record.
	Highest uint32
	// Initialised is false when the coord cluster has none of them.
	Initialised bool
	// Anchored is true when allocation may proceed from these records:
	// the allocation record (or, before there was one, the coord
	// cluster's own epoch record) was written on this etcd cluster.
	Anchored bool
	// Revision is the revision they were read at; ClusterID the coord
	// cluster's ID then.
	Revision  int64
	ClusterID string
	allocRev  int64
}

// ReadRecorded reads every allocation record of the coord cluster in one
// transaction, so the result is one revision's view.
func ReadRecorded(ctx context.Context, coord clientv3.KV) (Recorded, error) {
	resp, err := coord.Txn(ctx).Then(
		clientv3.OpGet(AllocKey),
		clientv3.OpGet(HighestPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(lockkey.EpochKey),
	).Commit()
	if err != nil {
		return Recorded{}, err
	}
	first := func(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
		if len(kvs) == 0 {
			return nil
		}
		return kvs[0]
	}
	return RecordedFrom(resp.Header.ClusterId, resp.Header.Revision, first(resp.Responses[0].GetResponseRange().Kvs),
		resp.Responses[1].GetResponseRange().Kvs, first(resp.Responses[2].GetResponseRange().Kvs))
}

// RecordedFrom is what the coord cluster clusterID had recorded at rev,
// given its allocation record, its clusters' highest records and its own
// epoch record (nil when absent): read live, or from a snapshot.
func RecordedFrom(clusterID uint64, rev int64, alloc *mvccpb.KeyValue, highest []*mvccpb.KeyValue, own *mvccpb.KeyValue) (Recorded, error) {
	r := Recorded{Revision: rev, ClusterID: FormatID(clusterID)}
	note := func(e uint32) { r.Highest, r.Initialised = max(r.Highest, e), true }
	allocFound := false
	if alloc != nil {
		var a allocRecord
		if err := json.Unmarshal(alloc.Value, &a); err != nil || a.Epoch > token.MaxEpoch {
			return Recorded{}, fmt.Errorf("%w: %s is not an allocation record (%q)", ErrInvalid, AllocKey, alloc.Value)
		}
		note(a.Epoch)
		r.allocRev, allocFound = alloc.ModRevision, true
		r.Anchored = a.ClusterID == r.ClusterID
	}
	for _, kv := range highest {
		e, err := parseEpoch(string(kv.Key), kv.Value)
		if err != nil {
			return Recorded{}, err
		}
		note(e)
	}
	if own != nil {
		if st, err := Decode(own.Value, own.ModRevision); err == nil {
			note(st.Epoch)
			// Records from before the allocation record existed: trusted
			// when the coord cluster's own record is this cluster's.
			if !allocFound {
				r.Anchored = !st.Sealed(clusterID)
			}
		}
	}
	return r, nil
}

// Anchor starts (or, on a restored coord cluster, restarts) allocation:
// every epoch allocated after it exceeds above and every epoch the coord
// cluster has recorded, and is bound to its current cluster ID. For a new
// region above is 0; for a coord cluster rebuilt empty or restored, the
// highest epoch the region ever served (its audit archive, a snapshot
// manifest, the highest token stored at a fenced resource shifted right by
// 48 bits, the live shards' records). It refuses an anchored coord cluster,
// whose own floor already holds.
func Anchor(ctx context.Context, coord clientv3.KV, above uint32) (Recorded, error) {
	if above >= token.MaxEpoch {
		return Recorded{}, fmt.Errorf("%w: %d is at or above the last epoch a token can carry (%d)", ErrInvalid, above, token.MaxEpoch)
	}
	rec, err := ReadRecorded(ctx, coord)
	if err != nil {
		return Recorded{}, err
	}
	if rec.Anchored {
		return rec, fmt.Errorf("%w: the coord cluster is anchored already (highest recorded epoch %d)", ErrChanged, rec.Highest)
	}
	raw, _ := json.Marshal(allocRecord{Epoch: max(above, rec.Highest), ClusterID: rec.ClusterID})
	resp, err := coord.Txn(ctx).If(unchangedSince(rec)...).Then(clientv3.OpPut(AllocKey, string(raw))).Commit()
	if err != nil {
		return Recorded{}, err
	}
	if !resp.Succeeded {
		return Recorded{}, fmt.Errorf("%w: the coord cluster's epoch records changed while anchoring; run it again", ErrChanged)
	}
	return ReadRecorded(ctx, coord)
}

// unchangedSince compares every record ReadRecorded read: none was written
// after rec was read.
func unchangedSince(rec Recorded) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(AllocKey), "=", rec.allocRev),
		clientv3.Compare(clientv3.ModRevision(HighestPrefix), "<", rec.Revision+1).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(lockkey.EpochKey), "<", rec.Revision+1),
	}
}

// Allocate hands cluster a new epoch, at least atLeast and above every
// epoch the coord cluster has recorded, and records it as the cluster's
// highest, in one transaction on the coord cluster that commits only if no
// record changed since they were read. An allocation that is then not
// used leaves a gap, which is harmless: only reuse is not.
func Allocate(ctx context.Context, coord clientv3.KV, cluster string, atLeast uint32) (uint32, error) {
	if cluster == "" {
		return 0, errors.New("epoch: allocate: a cluster name is required")
	}
	for {
		rec, err := ReadRecorded(ctx, coord)
		switch {
		case err != nil:
			return 0, err
		case !rec.Initialised:
			return 0, ErrUninitialised
		case !rec.Anchored:
			return 0, ErrCoordRestored
		}
		next := max(rec.Highest+1, atLeast)
		if next > token.MaxEpoch {
			return 0, fmt.Errorf("%w: epoch %d is past the last a token can carry (%d)", ErrInvalid, next, token.MaxEpoch)
		}
		raw, _ := json.Marshal(allocRecord{Epoch: next, ClusterID: rec.ClusterID})
		resp, err := coord.Txn(ctx).If(unchangedSince(rec)...).
			Then(clientv3.OpPut(AllocKey, string(raw)), clientv3.OpPut(HighestPrefix+cluster, strconv.FormatUint(uint64(next), 10))).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return next, nil
		}
		// A record changed after the read; read again. Each retry follows
		// a commit by someone else, so the loop makes progress.
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// Highest is the highest epoch recorded for cluster on the coord cluster;
// 0 if none is.
func Highest(ctx context.Context, coord clientv3.KV, cluster string) (uint32, error) {
	resp, err := coord.Get(ctx, HighestPrefix+cluster)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return parseEpoch(HighestPrefix+cluster, resp.Kvs[0].Value)
}

// NoteHighest records on the coord cluster that cluster has reached epoch
// e, unless a higher epoch is recorded already.
func NoteHighest(ctx context.Context, coord clientv3.KV, cluster string, e uint32) error {
	key := HighestPrefix + cluster
	for {
		resp, err := coord.Get(ctx, key)
		if err != nil {
			return err
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) > 0 {
			cur, err := parseEpoch(key, resp.Kvs[0].Value)
			if err != nil {
				return err
			}
			if cur >= e {
				return nil
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		put, err := coord.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, strconv.FormatUint(uint64(e), 10))).Commit()
		if err != nil || put.Succeeded {
			return err
		}
	}
}

func parseEpoch(key string, raw []byte) (uint32, error) {
	e, err := strconv.ParseUint(string(raw), 10, 32)
	if err != nil || e > uint64(token.MaxEpoch) {
		return 0, fmt.Errorf("%w: %s holds %q, not an epoch up to %d", ErrInvalid, key, raw, token.MaxEpoch)
	}
	return uint32(e), nil
}
