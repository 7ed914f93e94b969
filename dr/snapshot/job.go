package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/lockplane/lockplane/services/election"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys the job keeps on the cluster it snapshots: its election, and the
// time of the last snapshot stored, so a successor keeps the schedule.
const (
	ElectionPrefix = "/sys/snapshot/leader/"
	LastKey        = "/sys/snapshot/last"
)

// electionTTL is the job's election lease's.
const electionTTL = 10 * time.Second

// Store is where snapshots go: the snapshot store.
type Store interface {
	Put(ctx context.Context, m Manifest, file string) (Manifest, error)
}

// Job snapshots one cluster into the snapshot store every Every, as a singleton:
// every member host of the cluster runs one, and the one elected on the
// cluster itself takes the snapshots (a snapshot needs the root role, so
// the job runs where the cluster's data already is, never on an arbiter).
type Job struct {
	Source Source
	// Etcd is a client of the same cluster, for the election and the
	// schedule's record.
	Etcd  *clientv3.Client
	Store Store
	// Name is this instance's, in the election (its host).
	Name string
	// Every is the schedule; Dir holds the snapshot file while it is
	// stored.
	Every time.Duration
	Dir   string
	// OpTimeout bounds each etcd call and the election lease's; 5 s when
	// zero. The election's TTL is 10 s. After a term ends, the job
	// campaigns again after a backoff from OpTimeout up to 6 OpTimeout.
	OpTimeout time.Duration
	// StoreTimeout bounds storing one snapshot in the snapshot store; 30 minutes
	// when zero. A snapshot store that stalls must not hold the election forever.
	StoreTimeout time.Duration
	// Resign is how many snapshots in a row may fail before this
	// instance gives up the election, so another member's host (whose
	// member may be healthy) takes over; 3 when zero.
	Resign int
	Logger *slog.Logger
	// Taken, when set, is called with each stored snapshot's manifest, or
	// the error of a failed attempt (metrics, tests).
	Taken func(Manifest, error)
	// Recorded, when set, is called with the time of the cluster's last
	// recorded snapshot whenever the elected instance reads it (before
	// each wait), so that an instance that has just been elected reports
	// how old the cluster's newest snapshot is, not that it has none.
	Recorded func(time.Time)
	// After is the clock's timer; time.After when nil.
	After func(time.Duration) <-chan time.Time
}

// Run takes part in the election and, while elected, snapshots on the
// schedule until ctx ends (it then returns nil). A failed snapshot is
// retried after a tenth of Every (at least 10 s), never silently skipped:
// each attempt's outcome reaches Taken and the log.
func (j Job) Run(ctx context.Context) error {
	switch {
	case j.Every <= 0:
		return errors.New("snapshot job: every: a period above zero is required")
	case j.Store == nil:
		return errors.New("snapshot job: store: a snapshot store is required")
	case j.Etcd == nil:
		return errors.New("snapshot job: etcd: a client of the cluster is required")
	case j.Dir == "":
		return errors.New("snapshot job: dir: a directory for the snapshot file is required")
	}
	if j.OpTimeout == 0 {
		j.OpTimeout = 5 * time.Second
	}
	if j.StoreTimeout == 0 {
		j.StoreTimeout = 30 * time.Minute
	}
	if j.Resign == 0 {
		j.Resign = 3
	}
	if j.Logger == nil {
		j.Logger = slog.New(slog.DiscardHandler)
	}
	if j.After == nil {
		j.After = time.After
	}
	el := election.Election{Coord: j.Etcd, Prefix: ElectionPrefix + j.Source.Cluster, Name: j.Name, TTL: electionTTL, OpTimeout: j.OpTimeout}
	// The first wait before campaigning again is up to OpTimeout (as long
	// as a failed call took; jittered, so that instances that failed
	// together do not campaign together); it grows while campaigns keep
	// failing at once.
	b := election.Backoff{Min: j.OpTimeout, Max: 6 * j.OpTimeout, After: j.After}
	el.Run(ctx, b, j.lead, func(err error) {
		j.Logger.Warn("snapshot job: stepped down or could not campaign; campaigning again", "cluster", j.Source.Cluster, "err", err)
	})
	return nil
}

// lead is the elected instance's loop.
func (j Job) lead(ctx context.Context, leader clientv3.Cmp) error {
	failed := 0
	for {
		last, err := j.last(ctx)
		if err != nil {
			return err
		}
		if j.Recorded != nil && !last.IsZero() {
			j.Recorded(last)
		}
		wait := time.Until(last.Add(j.Every))
		if wait > j.Every {
			// A clock ahead (here or where the last one was taken) must
			// not stop the schedule: wait one period at most.
			j.Logger.Warn("snapshot job: the last snapshot is recorded in the future; waiting one period", "cluster", j.Source.Cluster, "last", last)
			wait = j.Every
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-j.After(wait):
			}
		}
		m, err := j.Once(ctx)
		if j.Taken != nil {
			j.Taken(m, err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if failed++; failed >= j.Resign {
				return fmt.Errorf("snapshot job: %d snapshots in a row failed; stepping down for another member's host: %w", failed, err)
			}
			retry := max(j.Every/10, 10*time.Second)
			j.Logger.Error("snapshot job: snapshot failed; trying again", "cluster", j.Source.Cluster, "in", retry, "failed", failed, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-j.After(retry):
			}
			continue
		}
		failed = 0
		j.Logger.Info("snapshot stored", "cluster", m.Cluster, "revision", m.Revision, "object", m.Object, "bytes", m.Size)
		if err := j.record(ctx, leader, m.TakenAt); err != nil {
			return err
		}
	}
}

// Once takes one snapshot of the cluster and stores it.
func (j Job) Once(ctx context.Context) (Manifest, error) {
	if err := os.MkdirAll(j.Dir, 0o700); err != nil {
		return Manifest{}, err
	}
	// A file of its own: a --once beside the running job must not share it.
	f, err := os.CreateTemp(j.Dir, j.Source.Cluster+"-*.db")
	if err != nil {
		return Manifest{}, err
	}
	file := f.Name()
	f.Close() // etcd's client writes FILE.part, then renames it over this
	defer os.Remove(file)
	m, err := Take(ctx, j.Source, file)
	if err != nil {
		return m, err
	}
	timeout := j.StoreTimeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return j.Store.Put(pctx, m, file)
}

// last is when the last snapshot was stored, by any instance; the zero
// time if never.
func (j Job) last(ctx context.Context) (time.Time, error) {
	gctx, cancel := context.WithTimeout(ctx, j.OpTimeout)
	defer cancel()
	resp, err := j.Etcd.Get(gctx, LastKey+"/"+j.Source.Cluster)
	if err != nil {
		return time.Time{}, fmt.Errorf("snapshot job: read the schedule: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}, nil
	}
	ns, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		j.Logger.Warn("snapshot job: the schedule record is unreadable; snapshotting now", "cluster", j.Source.Cluster, "value", strconv.Quote(string(resp.Kvs[0].Value)))
		return time.Time{}, nil
	}
	return time.Unix(0, ns), nil
}

// record notes t as the last snapshot's time, only while still elected.
func (j Job) record(ctx context.Context, leader clientv3.Cmp, t time.Time) error {
	pctx, cancel := context.WithTimeout(ctx, j.OpTimeout)
	defer cancel()
	resp, err := j.Etcd.Txn(pctx).If(leader).Then(clientv3.OpPut(LastKey+"/"+j.Source.Cluster, strconv.FormatInt(t.UnixNano(), 10))).Commit()
	if err != nil {
		return fmt.Errorf("snapshot job: record the schedule: %w", err)
	}
	if !resp.Succeeded {
		return election.ErrDeposed
	}
	return nil
}
