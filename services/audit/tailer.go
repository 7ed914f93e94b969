package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/election"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store is where audit events go. Inserting an event twice must leave it
// once (the ClickHouse store keys rows by cluster ID, revision and key), so
// a tailer resuming from its checkpoint may replay what it wrote.
type Store interface {
	Insert(ctx context.Context, events []Event) error
}

// Config is one cluster's tailer.
type Config struct {
	// Cluster is the tailed cluster's name in the region ("coord" or a
	// shard's); Etcd is a client of it.
	Cluster string
	Etcd    *clientv3.Client
	// Coord is a client of the coord cluster, which holds the election
	// and the checkpoint (the same client as Etcd when tailing coord).
	Coord *clientv3.Client
	Store Store
	// Name identifies this tailer instance in the election.
	Name string
	// CheckpointEvery is how often the checkpoint moves; 2s when zero.
	CheckpointEvery time.Duration
	// OpTimeout bounds every etcd and store call; 5s when zero.
	OpTimeout time.Duration
	// LeaderTTL is the election session's TTL; 10s when zero.
	LeaderTTL time.Duration
	// MaxPendingEvents and MaxPendingBytes bound what the tailer holds of
	// the log read but not yet stored: events, and bytes of their keys and
	// values (current and previous). Past either, it stops reading until
	// the store has half of it (see feed.go). 20,000 events and 32 MiB
	// when zero; a negative MaxPendingEvents removes the bound, only to
	// measure what it saves.
	MaxPendingEvents int64
	MaxPendingBytes  int64
	Metrics          *Metrics
	Logger           *slog.Logger
}

// ElectionPrefix and CheckpointPrefix are the coord cluster's keys of each
// cluster's tailer: its election and its checkpoint.
const (
	ElectionPrefix   = "/sys/audit/leader/"
	CheckpointPrefix = "/sys/audit/checkpoint/"
)

// checkpoint is the last revision of a cluster whose events the store has.
// The cluster ID says which revision space it belongs to: a cluster rebuilt
// or restored under a new ID starts its revisions again. Mark is the last
// key the store has a put of, which a cluster restored under the same ID
// (its revisions rewound and written again) no longer has at that revision.
type checkpoint struct {
	ClusterID string `json:"cluster_id"`
	Revision  int64  `json:"revision"`
	Mark      *mark  `json:"mark,omitempty"`
}

// ErrClusterChanged ends a tailer whose endpoints came to serve another
// cluster: Run again reads the new one from its start, after a gap.
var ErrClusterChanged = errors.New("audit: the tailed cluster changed under the tailer")

// Run tails cfg.Cluster while it is the elected tailer, until ctx ends
// (nil) or it is deposed (election.ErrDeposed: another tailer takes over
// from the checkpoint on). A second instance waits in the
// election. Every event reaches the store before the checkpoint passes
// its revision, and the checkpoint moves only under the election, so a
// deposed tailer cannot move it, backwards or at all. However far behind
// it starts, it holds at most MaxPendingEvents events (or MaxPendingBytes)
// of the log read and not stored, and one watch response (feed.go). While
// it leads, the lag gauges follow the cluster's head (Metrics).
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	el := election.Election{Coord: cfg.Coord, Prefix: ElectionPrefix + cfg.Cluster, Name: cfg.Name, TTL: cfg.LeaderTTL, OpTimeout: cfg.OpTimeout}
	cfg.Metrics.lead(cfg.Cluster, false)
	err := el.Lead(ctx, func(lctx context.Context, leader clientv3.Cmp) error {
		cfg.Logger.Info("audit: tailing", "cluster", cfg.Cluster, "tailer", cfg.Name)
		cfg.Metrics.lead(cfg.Cluster, true)
		pctx, cancel := context.WithCancel(lctx)
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			probe(pctx, cfg)
		}()
		t := &tailer{cfg: cfg, leader: leader}
		err := t.run(lctx)
		cancel()
		<-probed
		if ctx.Err() != nil {
			// Stopped, still leading: record how far the store has it, so
			// a successor does not replay it (or call it a gap after a
			// compaction).
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
			t.checkpoint(octx)
			cancel()
		}
		return err
	})
	// However leading ended, another tailer (or none) leads from here:
	// the lag series are its own, and a frozen one would mislead.
	cfg.Metrics.lead(cfg.Cluster, false)
	cfg.Metrics.forget(cfg.Cluster)
	return err
}

func (c *Config) defaults() {
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = 2 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 5 * time.Second
	}
	if c.LeaderTTL == 0 {
		c.LeaderTTL = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Coord == nil {
		c.Coord = c.Etcd
	}
	if c.MaxPendingEvents == 0 {
		c.MaxPendingEvents = 20000
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = 32 << 20
	}
}

type tailer struct {
	cfg    Config
	leader clientv3.Cmp // true while this tailer holds the election
	src    source
	epoch  uint32
	done   int64 // the last revision whose events the store has
	saved  int64 // the checkpointed revision
	// dirty is set when done passes a revision that is not the tailers'
	// own bookkeeping: checkpoints alone never cause another checkpoint.
	dirty  bool
	linger *time.Timer
	// storeWait is the pause after the store's last refusal.
	storeWait time.Duration
	// mark is the last put the store has (nil: none since the start or
	// the last rewind); rewoundAt is t.done when a rewind was last
	// recorded, so that one rewind makes one gap while the restored
	// cluster climbs back to it.
	mark      *mark
	rewoundAt int64
}

// source is the tailed cluster as its events name it.
type source struct{ name, id string }

func (t *tailer) run(ctx context.Context) error {
	ck, err := t.load(ctx)
	if err != nil {
		return err
	}
	head, err := t.get(ctx, t.cfg.Etcd, lockkey.EpochKey, 0)
	if err != nil {
		return err
	}
	t.src = source{name: t.cfg.Cluster, id: epoch.FormatID(head.Header.ClusterId)}
	t.done = ck.Revision
	if ck.ClusterID == t.src.id && ck.Revision > 0 {
		// Before the epoch is read at the checkpoint's revision: a
		// rewound cluster may not have reached it.
		t.mark = ck.Mark
		rewound, err := t.rewind(ctx)
		if err != nil {
			return err
		}
		if !rewound {
			// The epoch in force where reading resumes, not the newest:
			// the events after it carry it until the log advances it. (0,
			// unknown, when that revision is compacted.)
			head, err = t.get(ctx, t.cfg.Etcd, lockkey.EpochKey, ck.Revision)
			if errors.Is(err, rpctypes.ErrCompacted) {
				head, err = &clientv3.GetResponse{}, nil
			}
			if err != nil {
				return err
			}
		}
	}
	if len(head.Kvs) > 0 {
		if st, err := epoch.Decode(head.Kvs[0].Value, head.Kvs[0].ModRevision); err == nil {
			t.epoch = st.Epoch
		}
	}
	if ck.ClusterID != "" && ck.ClusterID != t.src.id {
		// A new revision space: say so, and read this one from its start.
		// Keyed at the new cluster's revision 0, which holds no event: at
		// the old checkpoint's revision it would share a row with the new
		// cluster's own event there (an epoch record restored, say).
		g := t.gap(0, 0, "")
		g.Detail = fmt.Sprintf("cluster ID changed from %s to %s (rebuilt or restored): %s's revisions after %d were not read, and this one's start again",
			ck.ClusterID, t.src.id, ck.ClusterID, ck.Revision)
		if err := t.insert(ctx, []Event{g}); err != nil {
			return err
		}
		t.done = 0
	}
	t.cfg.Metrics.start(t.cfg.Cluster, t.done)
	t.dirty = true // the first checkpoint records the cluster ID, even at no progress
	tick := time.NewTicker(t.cfg.CheckpointEvery)
	defer tick.Stop()
	for {
		if err := t.watch(ctx, tick.C); err != nil {
			return err
		}
	}
}

// watch reads the log from t.done+1 until the watch fails (nil: watch
// again) or the tailer must stop (an error). The feed reads ahead of the
// inserts, within Config's bound.
func (t *tailer) watch(ctx context.Context, tick <-chan time.Time) error {
	fctx, cancel := context.WithCancel(ctx)
	out, freed := make(chan item), make(chan cost)
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		t.feed(fctx, t.done+1, out, freed)
	}()
	defer func() { cancel(); <-fed }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if err := t.sameCluster(ctx); err != nil {
				return err
			}
			if _, err := t.rewind(ctx); err != nil {
				return err
			}
			if err := t.checkpoint(ctx); err != nil {
				return err
			}
		case it := <-out:
			// Store what has arrived in one insert: the store pays per
			// insert, and the feed keeps reading while it runs.
			var b batch
			for {
				b.cost.add(it.cost)
				if id := it.resp.Header.ClusterId; it.ok && id != 0 && epoch.FormatID(id) != t.src.id {
					// The endpoints serve another cluster now (restored or
					// rebuilt in place behind the client): another revision
					// space. Store what came before, and start again, where
					// run records the change as a gap and reads it anew.
					// Checked first: a shard restored above its old head
					// answers the resumed watch with its own compaction,
					// which is not the old cluster's.
					if err := t.flush(ctx, &b); err != nil {
						return t.flushFailed(ctx, err)
					}
					return fmt.Errorf("%w: %s is cluster %s now, not %s", ErrClusterChanged, t.cfg.Cluster, epoch.FormatID(id), t.src.id)
				}
				if it.ok && it.resp.IsProgressNotify() && it.resp.Header.Revision < t.done {
					// The member watched is behind what the tailer read:
					// a lagging follower, or the cluster rewound. The
					// rewind check reads linearizably and tells which.
					if err := t.flush(ctx, &b); err != nil {
						return t.flushFailed(ctx, err)
					}
					_, err := t.rewind(ctx)
					return err
				}
				if !it.ok || it.resp.Canceled || it.resp.CompactRevision > 0 || it.resp.Err() != nil {
					if err := t.flush(ctx, &b); err != nil {
						return t.flushFailed(ctx, err)
					}
					return t.interrupted(ctx, it.resp, it.ok)
				}
				t.collect(&b, it.resp)
				if len(b.events) >= maxBatch || t.half(b.cost) || !t.next(out, &it) {
					break
				}
			}
			c := b.cost
			if err := t.flush(ctx, &b); err != nil {
				return t.flushFailed(ctx, err)
			}
			select {
			case freed <- c:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// sameCluster ends the watch when the endpoints serve another cluster:
// a shard restored in place starts below the revision the watch waits
// for, so the watch alone would say nothing, perhaps for days. A read
// that fails says nothing either way: the watch handles outages.
func (t *tailer) sameCluster(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	resp, err := t.cfg.Etcd.Get(octx, lockkey.EpochKey, clientv3.WithCountOnly())
	cancel()
	if err != nil || resp.Header.ClusterId == 0 {
		return nil
	}
	if id := epoch.FormatID(resp.Header.ClusterId); id != t.src.id {
		return fmt.Errorf("%w: %s is cluster %s now, not %s", ErrClusterChanged, t.cfg.Cluster, id, t.src.id)
	}
	return nil
}

// flushFailed ends a watch after a failed flush: after a pause when the
// store refused (nil: watch again from what it has), at once otherwise.
func (t *tailer) flushFailed(ctx context.Context, err error) error {
	if errors.Is(err, errStoreDown) {
		return t.storeDown(ctx)
	}
	return err
}

// maxBatch bounds the events one insert carries; linger is how long a
// batch waits for the watch's next response. The watch hands buffered
// responses over one at a time from its own goroutine, so a batch that
// stopped at the first empty receive would carry one revision each and
// fall behind any store that pays per insert.
const (
	maxBatch = 5000
	linger   = 2 * time.Millisecond
)

// next receives the feed's next response into it if one comes within
// linger.
func (t *tailer) next(out <-chan item, it *item) bool {
	if t.linger == nil {
		t.linger = time.NewTimer(linger)
	} else {
		t.linger.Reset(linger)
	}
	select {
	case *it = <-out:
		t.linger.Stop()
		return true
	case <-t.linger.C:
		return false
	}
}

// batch is the events of consecutive watch responses, and the revision
// the tailer is done with once they are stored.
type batch struct {
	events []Event
	done   int64
	// epoch is the tailer's epoch before the batch: a refused batch is
	// read again from there.
	epoch   uint32
	started bool
	cost    cost  // what the feed counts for the batch's responses
	mark    *mark // the batch's last put
}

// interrupted handles a watch response that ends the watch: a compaction
// (a gap event, then on from the compaction), an error or a closed channel
// (watch again after a pause).
func (t *tailer) interrupted(ctx context.Context, resp clientv3.WatchResponse, ok bool) error {
	switch {
	case !ok:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return t.pause(ctx)
	case resp.CompactRevision > 0:
		// Revisions before the compaction are gone: record the gap,
		// never skip it silently, and go on from there.
		// The compaction's own revision is in the gap too: its events
		// would come without the values they replaced, which say whose
		// hold ended.
		g := t.gap(t.done+1, resp.CompactRevision, "compacted before the tailer read them")
		if err := t.insert(ctx, []Event{g}); err != nil {
			return err
		}
		t.done, t.dirty = resp.CompactRevision, true
		t.cfg.Metrics.stored(t.cfg.Cluster, t.done, nil)
		return nil
	default:
		t.cfg.Logger.Warn("audit: watch failed; watching again", "cluster", t.cfg.Cluster, "err", resp.Err())
		return t.pause(ctx)
	}
}

// collect adds one watch response's revisions to b.
func (t *tailer) collect(b *batch, resp clientv3.WatchResponse) {
	if !b.started {
		b.epoch, b.started = t.epoch, true
	}
	b.done = max(b.done, t.done)
	if resp.IsProgressNotify() {
		// Every event up to the header's revision has been sent.
		b.done = max(b.done, resp.Header.Revision)
		t.dirty = true
		return
	}
	now := time.Now().UTC()
	for i := 0; i < len(resp.Events); {
		r := revision{rev: resp.Events[i].Kv.ModRevision}
		for ; i < len(resp.Events) && resp.Events[i].Kv.ModRevision == r.rev; i++ {
			r.events = append(r.events, resp.Events[i])
		}
		evs := classify(t.src, r, t.epoch, now)
		for j, e := range evs {
			if e.Kind == EpochAdvance {
				if st, err := epoch.Decode([]byte(e.Detail), e.Revision); err == nil {
					t.epoch, evs[j].Epoch = st.Epoch, st.Epoch
				}
			}
		}
		t.dirty = t.dirty || !ownBookkeeping(r)
		b.events = append(b.events, evs...)
		b.done = r.rev
		if m := markOf(r); m != nil {
			b.mark = m
		}
	}
}

// flush stores b's events and moves t.done past them. A store that
// refuses ends the watch (errStoreDown): the watch would otherwise go on
// buffering the log in memory while the store is down.
func (t *tailer) flush(ctx context.Context, b *batch) error {
	if len(b.events) > 0 {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		err := t.cfg.Store.Insert(octx, b.events)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			t.cfg.Metrics.storeFailed(t.cfg.Cluster)
			t.cfg.Logger.Warn("audit: store refused a batch; reading it again once the store answers", "cluster", t.cfg.Cluster, "events", len(b.events), "err", err)
			t.epoch, *b = b.epoch, batch{}
			return errStoreDown
		}
	}
	t.storeWait = 0
	if b.done > t.done {
		t.done = b.done
	}
	if b.mark != nil {
		t.mark = b.mark
	}
	t.cfg.Metrics.stored(t.cfg.Cluster, t.done, b.events)
	*b = batch{}
	return nil
}

// errStoreDown ends a watch whose batch the store refused.
var errStoreDown = errors.New("audit: the store refused a batch")

// storeDown waits before the watch reads the refused batch again, longer
// each time the store refuses (to 30 s).
func (t *tailer) storeDown(ctx context.Context) error {
	t.storeWait = min(max(2*t.storeWait, 250*time.Millisecond), 30*time.Second)
	return sleep(ctx, t.storeWait)
}

// insert stores events, trying again with backoff while the store fails:
// the checkpoint does not pass what the store does not have.
func (t *tailer) insert(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		err := t.cfg.Store.Insert(octx, events)
		cancel()
		if err == nil {
			return nil
		}
		t.cfg.Metrics.storeFailed(t.cfg.Cluster)
		t.cfg.Logger.Warn("audit: store refused a batch; trying again", "cluster", t.cfg.Cluster, "events", len(events), "err", err)
		if err := sleep(ctx, backoff); err != nil {
			return err
		}
	}
}

func (t *tailer) gap(from, to int64, why string) Event {
	t.cfg.Metrics.gapped(t.cfg.Cluster)
	return Event{ClusterID: t.src.id, Cluster: t.src.name, Revision: to, Kind: Gap, At: time.Now().UTC(), Epoch: t.epoch,
		Detail: fmt.Sprintf("revisions %d to %d: %s", from, to, why)}
}

// load reads the cluster's checkpoint from the coord cluster.
func (t *tailer) load(ctx context.Context) (checkpoint, error) {
	resp, err := t.get(ctx, t.cfg.Coord, CheckpointPrefix+t.cfg.Cluster, 0)
	if err != nil {
		return checkpoint{}, fmt.Errorf("audit: read the checkpoint of %s: %w", t.cfg.Cluster, err)
	}
	var ck checkpoint
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &ck); err != nil {
			return checkpoint{}, fmt.Errorf("audit: the checkpoint of %s is unreadable (%v); delete %s%s to read the log from its start", t.cfg.Cluster, err, CheckpointPrefix, t.cfg.Cluster)
		}
	}
	return ck, nil
}

// checkpoint records t.done, if it moved, while this tailer leads.
func (t *tailer) checkpoint(ctx context.Context) error {
	if !t.dirty || t.done == t.saved {
		return nil
	}
	b, _ := json.Marshal(checkpoint{ClusterID: t.src.id, Revision: t.done, Mark: t.mark})
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	defer cancel()
	resp, err := t.cfg.Coord.Txn(octx).If(t.leader).Then(clientv3.OpPut(CheckpointPrefix+t.cfg.Cluster, string(b))).Commit()
	if err != nil {
		t.cfg.Logger.Warn("audit: checkpoint failed; trying at the next tick", "cluster", t.cfg.Cluster, "err", err)
		return nil
	}
	if !resp.Succeeded {
		t.cfg.Metrics.forget(t.cfg.Cluster)
		return election.ErrDeposed
	}
	t.saved, t.dirty = t.done, false
	return nil
}

// ownBookkeeping reports whether a revision holds only the tailers' own
// elections and checkpoints.
func ownBookkeeping(r revision) bool {
	for _, ev := range r.events {
		if !strings.HasPrefix(string(ev.Kv.Key), "/sys/audit/") {
			return false
		}
	}
	return true
}

// get reads key from cli (at rev, when not 0), each try under the op
// deadline, trying again while etcd does not answer (a leader election):
// a tailer outlasts what passes.
func (t *tailer) get(ctx context.Context, cli *clientv3.Client, key string, rev int64) (*clientv3.GetResponse, error) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		resp, err := cli.Get(octx, key, clientv3.WithRev(rev))
		cancel()
		if err == nil {
			return resp, nil
		}
		if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrCompacted) {
			return nil, fmt.Errorf("audit: read %s on %s: %w", key, t.cfg.Cluster, err)
		}
		if err := sleep(ctx, backoff); err != nil {
			return nil, err
		}
	}
}

// probe reads the cluster's head every CheckpointEvery, each read under
// the op deadline, until ctx ends, so the lag gauges follow the cluster
// whatever the tailer waits on: a refusing store, a slow insert, a watch
// that delivers nothing.
func probe(ctx context.Context, cfg Config) {
	tick := time.NewTicker(cfg.CheckpointEvery)
	defer tick.Stop()
	for {
		octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		resp, err := cfg.Etcd.Get(octx, lockkey.EpochKey, clientv3.WithCountOnly())
		cancel()
		if err == nil {
			cfg.Metrics.head(cfg.Cluster, resp.Header.Revision)
		}
		cfg.Metrics.refresh(cfg.Cluster)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pause waits a moment before watching again after a failed watch.
func (t *tailer) pause(ctx context.Context) error {
	return sleep(ctx, 200*time.Millisecond+rand.N(300*time.Millisecond))
}

func sleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
