package epoch

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/token"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The coord cluster's allocation records (ADR-03). AllocKey holds the last
// epoch allocated to any cluster of the region; HighestPrefix+NAME the
// highest epoch allocated to (or seen on) cluster NAME. An allocation
// exceeds all of them and the coord cluster's own record, so no two
// clusters are ever given one epoch and no cluster is given an epoch at or
// below one it had.
const (
	AllocKey      = "/sys/epoch-alloc"
	HighestPrefix = "/sys/epochs/"
)

// ErrUninitialised means the coord cluster holds no allocation record and
// no epoch record at all: a new region, or a coord cluster rebuilt empty.
// Only an operator can tell which, and so name the epoch to start above
// (Initialise).
var ErrUninitialised = errors.New("epoch: the coord cluster has no epoch allocation record: " +
	"it is new or was rebuilt empty; an operator must initialise it above the highest epoch the region served")

// Recorded is what the coord cluster has recorded of epochs, read at one
// revision.
type Recorded struct {
	// Highest is the highest epoch recorded anywhere: the allocation
	// record, any cluster's highest, the coord cluster's own record.
	Highest uint32
	// Initialised is false when the coord cluster has none of them.
	Initialised bool
	// allocRev is AllocKey's ModRevision (0 if absent), for the
	// allocation's compare.
	allocRev int64
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
	var r Recorded
	note := func(e uint32) { r.Highest, r.Initialised = max(r.Highest, e), true }
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		e, err := parseEpoch(AllocKey, kvs[0].Value)
		if err != nil {
			return Recorded{}, err
		}
		note(e)
		r.allocRev = kvs[0].ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		e, err := parseEpoch(string(kv.Key), kv.Value)
		if err != nil {
			return Recorded{}, err
		}
		note(e)
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		st, err := Decode(kvs[0].Value, kvs[0].ModRevision)
		if err != nil {
			return Recorded{}, err
		}
		note(st.Epoch)
	}
	return r, nil
}

// Initialise starts allocation on a coord cluster that has recorded
// nothing: every epoch allocated after it exceeds above. For a new region
// above is 0; for a coord cluster rebuilt empty it is the highest epoch the
// region ever served (its audit archive, a snapshot manifest, or the
// highest token stored at a fenced resource shifted right by 48 bits). It
// refuses a coord cluster that has records, whose own floor already holds.
func Initialise(ctx context.Context, coord clientv3.KV, above uint32) error {
	if above >= token.MaxEpoch {
		return fmt.Errorf("epoch: %d is at or above the last epoch a token can carry (%d)", above, token.MaxEpoch)
	}
	rec, err := ReadRecorded(ctx, coord)
	if err != nil {
		return err
	}
	if rec.Initialised {
		return fmt.Errorf("epoch: the coord cluster is initialised already (highest recorded epoch %d)", rec.Highest)
	}
	resp, err := coord.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(AllocKey), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(lockkey.EpochKey), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(HighestPrefix), "=", 0).WithPrefix(),
	).Then(clientv3.OpPut(AllocKey, strconv.FormatUint(uint64(above), 10))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errors.New("epoch: the coord cluster was initialised concurrently")
	}
	return nil
}

// Allocate hands cluster a new epoch, at least atLeast and above every
// epoch the coord cluster has recorded, and records it as the cluster's
// highest, in one transaction on the coord cluster. An allocation that is
// then not used leaves a gap, which is harmless: only reuse is not.
func Allocate(ctx context.Context, coord clientv3.KV, cluster string, atLeast uint32) (uint32, error) {
	if cluster == "" {
		return 0, errors.New("epoch: allocate: a cluster name is required")
	}
	for {
		rec, err := ReadRecorded(ctx, coord)
		if err != nil {
			return 0, err
		}
		if !rec.Initialised {
			return 0, ErrUninitialised
		}
		next := max(rec.Highest+1, atLeast)
		if next > token.MaxEpoch {
			return 0, fmt.Errorf("epoch: epoch %d is past the last a token can carry (%d)", next, token.MaxEpoch)
		}
		v := strconv.FormatUint(uint64(next), 10)
		resp, err := coord.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(AllocKey), "=", rec.allocRev)).
			Then(clientv3.OpPut(AllocKey, v), clientv3.OpPut(HighestPrefix+cluster, v)).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return next, nil
		}
		// Another allocation committed first; read again. Each retry
		// follows a commit by someone else, so the loop makes progress.
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// Highest is the highest epoch recorded for cluster on the coord cluster
// kv; 0 if none is.
func Highest(ctx context.Context, kv clientv3.KV, cluster string) (uint32, error) {
	resp, err := kv.Get(ctx, HighestPrefix+cluster)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return parseEpoch(HighestPrefix+cluster, resp.Kvs[0].Value)
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

func parseEpoch(key string, raw []byte) (uint32, error) {
	e, err := strconv.ParseUint(string(raw), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("epoch: %s: %w", key, err)
	}
	return uint32(e), nil
}
