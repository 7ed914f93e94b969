package epoch

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	// Quiet is the least quiet period of an advance of a cluster with live
	// sessions; the period is at least the longest TTL among the sessions
	// the advance ends plus QuietMargin, whatever Quiet says, so a class
	// whose TTL a policy reload changed is waited out as its sessions were
	// opened. A cluster without sessions (Bootstrap's) gets none.
	Quiet time.Duration
	// Placement is the advancing side's class.Placement, stamped into the
	// new record: the advance deletes every hold, so keys may move tier
	// now. Empty keeps the current record's.
	Placement string
}

// QuietMargin is added to the longest session TTL to make an advance's
// quiet period: it covers the advance's commit after its record's Since,
// the arbiters' epoch watches delivering it, and clock skew between the
// advancing process and the arbiters (NTP-bounded, docs/epochs.md).
const QuietMargin = time.Second

// Quiet is the quiet period of an advance of a cluster whose sessions
// live at most longestTTL unrenewed.
func Quiet(longestTTL time.Duration) time.Duration { return longestTTL + QuietMargin }

// Advanced is the outcome of Advance.
type Advanced struct {
	State
	Previous                     uint32
	DeletedHolds, DeletedWaiters int64
	// DeletedSessions counts the session records the advance deleted:
	// sessions opened before it are over (their next renewal or grant
	// answers SESSION_EXPIRED).
	DeletedSessions int64
	Revision        int64
}

// Advance moves a cluster (target) from c.Expected to an epoch allocated on
// the coord cluster, binds it to the cluster ID target reports now and
// deletes every hold, waiter and session record there, in one transaction
// on target that compares the record it replaces (or its absence). It
// returns ErrChanged if the record is not the one expected. target may be
// coord itself.
//
// Sessions opened before the advance are over: a grant compares its
// session's record, and a renewal that finds it gone answers
// SESSION_EXPIRED. If any session record existed when the transaction
// committed, the new record carries QuietUntil (Change.Quiet), and no
// arbiter grants a key before it: a holder whose renewal was confirmed
// just before the advance may believe it holds until then.
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
	// The sessions the advance ends, read before an epoch is allocated
	// (a failed advance wastes none): the quiet period waits out the
	// longest TTL any of them was renewed for.
	sessions, err := target.Get(ctx, lockkey.SessionPrefix, clientv3.WithPrefix())
	if err != nil {
		return Advanced{}, err
	}
	next, err := Allocate(ctx, coord, c.Cluster, floor+1)
	if err != nil {
		return Advanced{}, err
	}
	// The cluster ID comes from the read above: the cluster the transaction
	// below commits on (a restored cluster's ID never changes back).
	rec := Record{Epoch: next, ClusterID: FormatID(resp.Header.ClusterId), Since: time.Now().UTC(),
		Reason: c.Reason, MapVersion: mapVersion, Placement: c.Placement}
	if rec.Placement == "" && cur != nil {
		rec.Placement = cur.Placement
	}
	quietFor := time.Duration(0)
	if longest, any := longestTTL(sessions.Kvs); any {
		quietFor = max(c.Quiet, Quiet(longest))
	}
	if cur != nil && cur.Placement != "" && rec.Placement != cur.Placement {
		// Keys change tier here: holders of them on the cluster they
		// left may believe for a TTL, whether or not this one had any.
		quietFor = max(quietFor, c.Quiet)
		if c.Quiet == 0 {
			quietFor = max(quietFor, Quiet(class.MaxTTL))
		}
	}
	quietFrom := func(d time.Duration) time.Time {
		until := time.Time{}
		if d > 0 {
			until = rec.Since.Add(d)
		}
		if cur != nil && cur.QuietUntil.After(until) {
			// A second advance within the first's quiet period: the
			// holders the first ended may still believe.
			until = cur.QuietUntil
		}
		return until
	}
	rec.QuietUntil = quietFrom(quietFor)
	// A session opened after the read, of a TTL it did not see, makes the
	// record wait out the platform's longest instead (nested Txn: etcd
	// evaluates every compare before any write).
	late := rec
	late.QuietUntil = quietFrom(max(quietFor, Quiet(class.MaxTTL)))
	raw, _ := json.Marshal(rec)
	lateRaw, _ := json.Marshal(late)
	noNewSession := clientv3.Compare(clientv3.CreateRevision(lockkey.SessionPrefix), "<", sessions.Header.Revision+1).WithPrefix()
	txn, err := target.Txn(ctx).If(cmp).Then(
		clientv3.OpTxn([]clientv3.Cmp{noNewSession},
			[]clientv3.Op{clientv3.OpPut(lockkey.EpochKey, string(raw))},
			[]clientv3.Op{clientv3.OpPut(lockkey.EpochKey, string(lateRaw))}),
		clientv3.OpDelete(lockkey.HoldPrefix, clientv3.WithPrefix()),
		clientv3.OpDelete(lockkey.WaitPrefix, clientv3.WithPrefix()),
		clientv3.OpDelete(lockkey.SessionPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return Advanced{}, err
	}
	if !txn.Succeeded {
		return Advanced{}, fmt.Errorf("%w: cluster %s: its epoch record changed during the advance (another advance or a shard map stamp); read it again", ErrChanged, c.Cluster)
	}
	if !txn.Responses[0].GetResponseTxn().GetSucceeded() {
		rec, raw = late, lateRaw
	}
	rev := txn.Header.Revision
	if took := time.Since(rec.Since); !rec.QuietUntil.IsZero() && took > QuietMargin/2 {
		// The Txn took more of the margin than its share: the quiet period
		// counts from now, when it has certainly committed. Best effort:
		// a record changed meanwhile was advanced again, and keeps its own.
		longer := rec
		longer.QuietUntil = rec.QuietUntil.Add(took)
		if st, err := rewrite(ctx, target, State{Record: rec, Raw: raw}, longer, "a longer quiet period"); err == nil {
			rec, raw, rev = st.Record, st.Raw, st.ModRevision
		}
	}
	out := Advanced{
		State:           State{Record: rec, ModRevision: rev, Raw: raw},
		DeletedHolds:    txn.Responses[1].GetResponseDeleteRange().Deleted,
		DeletedWaiters:  txn.Responses[2].GetResponseDeleteRange().Deleted,
		DeletedSessions: txn.Responses[3].GetResponseDeleteRange().Deleted,
		Revision:        txn.Header.Revision,
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

// longestTTL is the longest TTL among session records, and whether there
// is any. A record that cannot be read counts as the platform's longest.
func longestTTL(kvs []*mvccpb.KeyValue) (time.Duration, bool) {
	var longest time.Duration
	for _, kv := range kvs {
		ttl := class.MaxTTL
		var rec struct {
			// The session record's TTL (services/lockkey/records.Session).
			TTLSeconds int64 `json:"ttl_seconds"`
		}
		if err := json.Unmarshal(kv.Value, &rec); err == nil && rec.TTLSeconds > 0 {
			ttl = time.Duration(rec.TTLSeconds) * time.Second
		}
		longest = max(longest, ttl)
	}
	return longest, len(kvs) > 0
}
