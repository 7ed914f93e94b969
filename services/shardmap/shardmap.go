// Package shardmap homes entity keys to entity shards (ADR-09): rendezvous
// hashing of a key's range (its namespace and first path segment) over the
// shards of a versioned map stored at /sys/shardmap on the coord cluster.
//
// Adding a shard moves only the ranges whose highest score becomes the new
// shard's, about 1/N of them. A move is fenced like a restore: the map
// first names the shard being added, ranges about to move take no new
// grants, and the move completes only once they have no holders and the
// new shard's epoch is above every source's (see Rebalancer).
package shardmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key is where the map lives on the coord cluster.
const Key = "/sys/shardmap"

// Map is one version of the shard map.
type Map struct {
	// Version increases by one on every change.
	Version int64 `json:"version"`
	// Shards are the entity clusters keys are homed to.
	Shards []string `json:"shards"`
	// Adding, while set, is a shard being added: ranges whose home it
	// becomes take no grants until the move completes.
	Adding string `json:"adding,omitempty"`
}

// Validate checks a map's own consistency.
func (m Map) Validate() error {
	if m.Version < 1 {
		return fmt.Errorf("shardmap: version: %d must be at least 1", m.Version)
	}
	if len(m.Shards) == 0 {
		return errors.New("shardmap: shards: at least one entity shard is required")
	}
	all := slices.Clone(m.Shards)
	if m.Adding != "" {
		all = append(all, m.Adding)
	}
	seen := map[string]bool{}
	for _, s := range all {
		if s == "" || seen[s] {
			return fmt.Errorf("shardmap: shards: %q is empty or named twice", s)
		}
		seen[s] = true
	}
	return nil
}

// Range is the unit that is homed and moved: a key's namespace and first
// path segment ("team-a/orders" for "team-a/orders/42"), so related keys
// stay on one shard.
func Range(key string) string {
	ns, rest, _ := strings.Cut(key, "/")
	first, _, _ := strings.Cut(rest, "/")
	return ns + "/" + first
}

// Home is the shard a key lives on under this map. During an add, a key
// of a moving range is still homed to its source until the move completes.
func (m Map) Home(key string) string { return rendezvous(m.Shards, Range(key)) }

// Moving reports whether the key's range is moving to the shard being
// added: it takes no new grants until the move completes.
func (m Map) Moving(key string) bool {
	return m.Adding != "" && rendezvous(append(slices.Clone(m.Shards), m.Adding), Range(key)) == m.Adding
}

// Next is the map once the shard being added has been added.
func (m Map) Next() Map {
	return Map{Version: m.Version + 1, Shards: append(slices.Clone(m.Shards), m.Adding)}
}

// rendezvous returns the shard with the highest score for r.
func rendezvous(shards []string, r string) string {
	best, bestScore := "", uint64(0)
	for _, s := range shards {
		if sc := score(s, r); best == "" || sc > bestScore || (sc == bestScore && s < best) {
			best, bestScore = s, sc
		}
	}
	return best
}

// score hashes a shard and a range together; the finalizer spreads FNV's
// weak high bits so scores compare fairly.
func score(shard, r string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(shard))
	h.Write([]byte{0})
	h.Write([]byte(r))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// DefaultOpTimeout bounds each etcd request of a map read or change whose
// caller gave no deadline (Clusters.OpTimeout when zero), so that none
// hangs through a quorum loss.
const DefaultOpTimeout = 2 * time.Second

// opCtx bounds one etcd request by timeout (DefaultOpTimeout when zero);
// a caller's earlier deadline still wins. WithRequireLeader makes a member
// without a leader refuse at once.
func opCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		timeout = DefaultOpTimeout
	}
	return context.WithTimeout(clientv3.WithRequireLeader(ctx), timeout)
}

// bounded gives ctx DefaultOpTimeout when it has no deadline of its own:
// Load and Store keep a caller's own bound, longer or not.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return opCtx(ctx, DefaultOpTimeout)
}

// Load reads the map from the coord cluster; found is false when none was
// ever stored. rev is the revision to watch for changes after.
func Load(ctx context.Context, kv clientv3.KV) (m Map, rev int64, found bool, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := kv.Get(ctx, Key)
	if err != nil {
		return Map{}, 0, false, err
	}
	if len(resp.Kvs) == 0 {
		return Map{}, resp.Header.Revision, false, nil
	}
	m, err = Decode(resp.Kvs[0].Value)
	return m, resp.Header.Revision, err == nil, err
}

// Decode parses and validates a stored map.
func Decode(raw []byte) (Map, error) {
	var m Map
	if err := json.Unmarshal(raw, &m); err != nil {
		return Map{}, fmt.Errorf("shardmap: %s: %w", Key, err)
	}
	return m, m.Validate()
}

// ErrConflict means the stored map was not the version expected.
var ErrConflict = errors.New("shardmap: the stored map changed")

// Store writes next if the stored map is still at version prev (0: none
// stored yet). also are put in the same Txn, only if next is stored.
func Store(ctx context.Context, kv clientv3.KV, prev int64, next Map, also ...clientv3.Op) error {
	if err := next.Validate(); err != nil {
		return err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	raw, _ := json.Marshal(next)
	cmp := clientv3.Compare(clientv3.CreateRevision(Key), "=", 0)
	if prev > 0 {
		old, _, found, err := Load(ctx, kv)
		if err != nil {
			return err
		}
		if !found || old.Version != prev {
			return fmt.Errorf("%w: expected version %d, found %d", ErrConflict, prev, old.Version)
		}
		cur, _ := json.Marshal(old)
		cmp = clientv3.Compare(clientv3.Value(Key), "=", string(cur))
	}
	resp, err := kv.Txn(ctx).If(cmp).Then(append([]clientv3.Op{clientv3.OpPut(Key, string(raw))}, also...)...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: expected version %d", ErrConflict, prev)
	}
	return nil
}
