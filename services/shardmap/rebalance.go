package shardmap

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is what a map change needs of a cluster; *clientv3.Client has it.
type Etcd interface {
	clientv3.KV
	clientv3.Watcher
}

// Clusters are the etcd clients a map change touches: the coord cluster,
// where the map lives, and every entity shard by name.
type Clusters struct {
	Coord  Etcd
	Shards map[string]Etcd
	// OpTimeout bounds each etcd request of a change; DefaultOpTimeout
	// when zero. The change as a whole is bounded by its caller's context.
	OpTimeout time.Duration
}

func (c Clusters) timeout() time.Duration {
	if c.OpTimeout > 0 {
		return c.OpTimeout
	}
	return DefaultOpTimeout
}

// op bounds one etcd request (or one epoch record operation) of a change.
func (c Clusters) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return opCtx(ctx, c.OpTimeout)
}

func (c Clusters) shard(name string) (Etcd, error) {
	if cl := c.Shards[name]; cl != nil {
		return cl, nil
	}
	return nil, fmt.Errorf("shardmap: shard %s: no client for it (give its endpoints)", name)
}

// Step is one reported step of a map change, for progress output.
type Step struct {
	Phase  string `json:"phase"`
	Detail string `json:"detail"`
}

// Init stores version 1 of the map over shards and stamps every shard's
// epoch record with it, so grants can be routed. It refuses when a map
// exists, and when a shard has no epoch record (see epoch.Bootstrap).
func Init(ctx context.Context, c Clusters, shards []string, progress func(Step)) (Map, error) {
	m := Map{Version: 1, Shards: slices.Clone(shards)}
	if err := m.Validate(); err != nil {
		return Map{}, err
	}
	// Stamp first, store second: a stamp without a stored map routes
	// nothing, while a map stored over unstamped shards would refuse their
	// grants (MOVING) until someone stamped them. A shard without an
	// epoch record is refused here, before anything is stored.
	for _, s := range shards {
		if _, err := c.shard(s); err != nil {
			return Map{}, err
		}
	}
	if err := stampAll(ctx, c, m, progress); err != nil {
		return Map{}, fmt.Errorf("shardmap: init: %w", err)
	}
	octx, cancel := c.op(ctx)
	err := Store(octx, c.Coord, 0, m)
	cancel()
	if err != nil {
		return Map{}, fmt.Errorf("shardmap: init: %w", err)
	}
	report(progress, "stored", fmt.Sprintf("map version 1 over %s", strings.Join(shards, ", ")))
	return m, nil
}

// Add adds shard name to the map, moving the ranges whose highest score
// becomes its own, about 1/(N+1) of them (ADR-09). The move is fenced:
//
//  1. the map names the shard as being added (version v+1); routers refuse
//     new grants on moving ranges, and every source shard is stamped v+1 so
//     a grant routed under version v fails its epoch compare;
//  2. Add waits until the moving ranges have no holds on any source;
//  3. the new shard's epoch is advanced above every source's, so a moved
//     key's next token exceeds every token it had before;
//  4. the map without Adding (v+2) is stored and every shard stamped v+2.
//
// An interrupted Add resumes where it stopped when run again for the same
// shard, up to stamping every shard with the final map when that was
// stored already. ctx bounds the wait for holders. why (who decided it,
// who approved it, and their reason) goes into the new shard's epoch
// record, which the audit archive locks away as the move's evidence.
// marks are put in the Txn that stores the final map (step 4): the caller's
// proof that this run, and no other, stored it. An add of another shard in
// progress is ErrOtherAdd.
func Add(ctx context.Context, c Clusters, name, why string, progress func(Step), marks ...Mark) (Map, error) {
	dest, err := c.shard(name)
	if err != nil {
		return Map{}, err
	}
	octx, cancel := c.op(ctx)
	cur, _, found, err := Load(octx, c.Coord)
	cancel()
	switch {
	case err != nil:
		return Map{}, err
	case !found:
		return Map{}, errors.New("shardmap: add: no map stored; run init first")
	case slices.Contains(cur.Shards, name):
		// Stored by an earlier run (or another add): what may be left is
		// stamping, without which a shard refuses grants routed by it.
		report(progress, "stored", fmt.Sprintf("map version %d over %s already holds %s", cur.Version, strings.Join(cur.Shards, ", "), name))
		return cur, stampAll(ctx, c, cur, progress)
	case cur.Adding != "" && cur.Adding != name:
		return cur, fmt.Errorf("%w (%s, map version %d); finish that first", ErrOtherAdd, cur.Adding, cur.Version)
	}
	adding := cur
	if cur.Adding == "" {
		adding = Map{Version: cur.Version + 1, Shards: slices.Clone(cur.Shards), Adding: name}
		octx, cancel := c.op(ctx)
		err := Store(octx, c.Coord, cur.Version, adding)
		cancel()
		if err != nil {
			return Map{}, fmt.Errorf("shardmap: add: %w", err)
		}
		report(progress, "adding", fmt.Sprintf("map version %d names %s as being added; its ranges take no new grants", adding.Version, name))
	}
	var floor uint32
	var placement string // the sources': the destination serves their keys as they place them
	for _, s := range adding.Shards {
		src, err := c.shard(s)
		if err != nil {
			return Map{}, err
		}
		octx, cancel := c.op(ctx)
		st, err := epoch.Stamp(octx, src, adding.Version)
		cancel()
		if errors.Is(err, epoch.ErrNoRecord) {
			return Map{}, fmt.Errorf("shardmap: add: source shard %s has no epoch record (rebuilt empty?): advance it "+
				"(lockctl epoch advance --cluster %s --expected 0 --reason ...), then run the add again (map version %d keeps its moving ranges refused until then): %w",
				s, s, adding.Version, err)
		}
		if err != nil {
			return Map{}, fmt.Errorf("shardmap: add: stamp %s: %w", s, err)
		}
		floor = max(floor, st.Epoch)
		placement = cmp.Or(placement, st.Placement)
	}
	report(progress, "fenced", fmt.Sprintf("sources stamped with map version %d; grants routed under older maps cannot commit", adding.Version))
	for _, s := range adding.Shards {
		if err := drain(ctx, c, s, adding, progress); err != nil {
			return Map{}, err
		}
	}
	// The destination takes an epoch allocated on the coord cluster, above
	// every epoch recorded there (each source's included) and above each
	// source's current one: a moved key's next token exceeds all its
	// earlier ones, and a destination that served before (restored, or
	// rebuilt empty) cannot repeat one of its own. A destination with no
	// record is bootstrapped here: adding it is the explicit step.
	octx, cancel = c.op(ctx)
	dst, found, err := epoch.Read(octx, dest)
	cancel()
	if err != nil {
		return Map{}, fmt.Errorf("shardmap: add: %s: %w", name, err)
	}
	if !found || dst.Epoch <= floor {
		ch := epoch.Change{Cluster: name, Floor: floor, MapVersion: adding.Version, Placement: placement,
			Reason: fmt.Sprintf("receives ranges under map version %d: %s", adding.Version+1, why), Quiet: epoch.Quiet(class.MaxTTL)}
		if found {
			ch.Expected = dst.Epoch
		}
		// The advance's reads, allocation and Txn: one bound for all.
		octx, cancel := opCtx(ctx, 5*c.timeout())
		adv, err := epoch.Advance(octx, c.Coord, dest, ch)
		cancel()
		if err != nil {
			return Map{}, fmt.Errorf("shardmap: add: advance %s: %w", name, err)
		}
		dst = adv.State
	}
	report(progress, "advanced", fmt.Sprintf("%s is at epoch %d, above every source (highest %d)", name, dst.Epoch, floor))
	next := adding.Next()
	raw, _ := json.Marshal(next)
	var also []clientv3.Op
	for _, mk := range marks {
		also = append(also, clientv3.OpPut(mk.Key, string(raw), clientv3.WithLease(mk.Lease)))
	}
	octx, cancel = c.op(ctx)
	err = Store(octx, c.Coord, adding.Version, next, also...)
	cancel()
	if err != nil {
		return Map{}, fmt.Errorf("shardmap: add: %w", err)
	}
	report(progress, "stored", fmt.Sprintf("map version %d over %s", next.Version, strings.Join(next.Shards, ", ")))
	return next, stampAll(ctx, c, next, progress)
}

// ErrOtherAdd means another shard is being added: Add adds one at a time.
var ErrOtherAdd = errors.New("shardmap: add: another shard is being added")

// Mark is a record Add puts in the Txn that stores the final map, so that
// whoever asked for the add can tell later that this run stored it: another
// add of the same shard leaves no mark of theirs. Its value is the final
// map as stored (Decode reads it); on Lease when not zero.
type Mark struct {
	Key   string
	Lease clientv3.LeaseID
}

// drain waits until no hold on shard s belongs to a range that is moving
// under m, then deletes the durable waiters of those ranges (their sessions
// are leases on s, which will no longer serve them). It re-reads after
// every deletion a watch reports; the watch is only a hint.
func drain(ctx context.Context, c Clusters, s string, m Map, progress func(Step)) error {
	cl := c.Shards[s]
	reported := -1
	for {
		octx, cancel := c.op(ctx)
		resp, err := cl.Get(octx, lockkey.HoldPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			return fmt.Errorf("shardmap: add: list holds on %s: %w", s, err)
		}
		held := 0
		for _, kv := range resp.Kvs {
			if m.Moving(strings.TrimPrefix(string(kv.Key), lockkey.HoldPrefix)) {
				held++
			}
		}
		if held == 0 {
			break
		}
		if held != reported {
			report(progress, "waiting", fmt.Sprintf("%d hold(s) on moving ranges of %s", held, s))
			reported = held
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cl.Watch(wctx, lockkey.HoldPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1),
			clientv3.WithFilterPut())
		select {
		case <-wch:
		case <-ctx.Done():
		}
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("shardmap: add: %d holds on moving ranges of %s remain: %w", held, s, ctx.Err())
		}
	}
	octx, cancel := c.op(ctx)
	resp, err := cl.Get(octx, lockkey.WaitPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return fmt.Errorf("shardmap: add: list waiters on %s: %w", s, err)
	}
	for _, kv := range resp.Kvs {
		key, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), lockkey.WaitPrefix), "#")
		if m.Moving(key) {
			octx, cancel := c.op(ctx)
			_, err := cl.Delete(octx, string(kv.Key))
			cancel()
			if err != nil {
				return fmt.Errorf("shardmap: add: delete a waiter on %s: %w", s, err)
			}
		}
	}
	report(progress, "drained", fmt.Sprintf("no holds on moving ranges of %s", s))
	return nil
}

func stampAll(ctx context.Context, c Clusters, m Map, progress func(Step)) error {
	for _, s := range m.Shards {
		octx, cancel := c.op(ctx)
		st, err := epoch.Stamp(octx, c.Shards[s], m.Version)
		cancel()
		if errors.Is(err, epoch.ErrNoRecord) {
			return fmt.Errorf("shardmap: shard %s has no epoch record: bootstrap it first (lockplane up does; "+
				"or lockctl epoch advance --cluster %s --expected 0 --reason ...): %w", s, s, err)
		}
		if err != nil {
			return fmt.Errorf("shardmap: stamp %s with version %d: %w", s, m.Version, err)
		}
		octx, cancel = c.op(ctx)
		err = epoch.NoteHighest(octx, c.Coord, s, st.Epoch)
		cancel()
		if err != nil {
			return fmt.Errorf("shardmap: record %s's epoch: %w", s, err)
		}
	}
	report(progress, "stamped", fmt.Sprintf("every shard serves map version %d", m.Version))
	return nil
}

func report(progress func(Step), phase, detail string) {
	if progress != nil {
		progress(Step{Phase: phase, Detail: detail})
	}
}
