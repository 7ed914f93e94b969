package arbiter

import (
	"context"
	"github.com/lockplane/lockplane/services/etcdauth"
	"slices"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxForced caps the ended holds one cluster's arbiter remembers: past
// it the oldest are forgotten first. Force-releases are rare and
// two-person; the cap only bounds memory against a flood.
const maxForced = 10000

// forceRecord and forcedHold are a force record's value and one hold it
// ended, defined once in services/lockkey/records: the Admin API writes
// them, keepalives report them.
type (
	forceRecord = records.Force
	forcedHold  = records.ForcedHold
)

// forcedEntry is one ended hold as keepalives report it.
type forcedEntry struct {
	hold   forcedHold
	action string
	record string // the force record's etcd key
	until  time.Time
	// revoked: the force-release revoked the whole session (its record
	// was deleted with the holds), so it may not be renewed.
	revoked bool
}

// forcedHolds are the holds force-released on one cluster in the last
// day, by session: every keepalive of a session reports its own. Filled
// from a watch on /sys/force/ (forceWatch).
type forcedHolds struct {
	mu        sync.Mutex
	bySession map[int64][]forcedEntry
	n         int
}

func newForcedHolds() *forcedHolds { return &forcedHolds{bySession: map[int64][]forcedEntry{}} }

// of is what a keepalive of session reports: its force-released holds.
func (f *forcedHolds) of(session int64) []*lockv1.EndedHold {
	f.mu.Lock()
	defer f.mu.Unlock()
	es := f.bySession[session]
	if len(es) == 0 {
		return nil
	}
	now := time.Now()
	var out []*lockv1.EndedHold
	live := es[:0]
	for _, e := range es {
		if now.After(e.until) {
			f.n--
			continue
		}
		live = append(live, e)
		out = append(out, &lockv1.EndedHold{Key: e.hold.Key, Revision: e.hold.Revision, Reason: lockv1.EndReason_FORCE_RELEASED, ActionId: e.action})
	}
	if len(live) == 0 {
		delete(f.bySession, session)
	} else {
		f.bySession[session] = live
	}
	return out
}

// revokedBy is the force-release that revoked session, "" for none.
func (f *forcedHolds) revokedBy(session int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.bySession[session] {
		if e.revoked {
			return e.action
		}
	}
	return ""
}

// put records a force record's holds; a record put again replaces its
// entries.
func (f *forcedHolds) put(key string, value []byte) {
	r, err := records.DecodeForce(value)
	if err != nil {
		return
	}
	until := time.Now().Add(records.ForceTTL)
	if !r.At.IsZero() {
		until = r.At.Add(records.ForceTTL)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteLocked(key)
	for _, h := range r.Holds {
		if f.n >= maxForced {
			f.dropOldestLocked()
		}
		f.bySession[h.Session] = append(f.bySession[h.Session], forcedEntry{hold: h, action: r.Action, record: key, until: until, revoked: r.RevokeSession})
		f.n++
	}
}

// delete forgets a force record whose lease ended (or that was deleted).
func (f *forcedHolds) delete(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteLocked(key)
}

func (f *forcedHolds) deleteLocked(key string) {
	for s, es := range f.bySession {
		kept := slices.DeleteFunc(es, func(e forcedEntry) bool { return e.record == key })
		f.n -= len(es) - len(kept)
		if len(kept) == 0 {
			delete(f.bySession, s)
		} else {
			f.bySession[s] = kept
		}
	}
}

// dropOldestLocked forgets the entry that ends first.
func (f *forcedHolds) dropOldestLocked() {
	var (
		oldest time.Time
		sess   int64
		idx    = -1
	)
	for s, es := range f.bySession {
		for i, e := range es {
			if idx < 0 || e.until.Before(oldest) {
				oldest, sess, idx = e.until, s, i
			}
		}
	}
	if idx < 0 {
		return
	}
	f.bySession[sess] = slices.Delete(f.bySession[sess], idx, idx+1)
	if len(f.bySession[sess]) == 0 {
		delete(f.bySession, sess)
	}
	f.n--
}

// reset replaces everything with a fresh listing of /sys/force/.
func (f *forcedHolds) reset(kvs []*mvccpb.KeyValue) {
	f.mu.Lock()
	f.bySession, f.n = map[int64][]forcedEntry{}, 0
	f.mu.Unlock()
	for _, kv := range kvs {
		if records.IsForceKey(string(kv.Key)) {
			f.put(string(kv.Key), kv.Value)
		}
	}
}

// watchForced keeps a.forced current until ctx ends: a listing, then a
// watch from the listing's revision, listed again whenever the watch ends
// (a compaction, a leader loss).
func (a *Arbiter) watchForced(ctx context.Context) {
	for ctx.Err() == nil {
		lctx, lcancel := a.opCtx(ctx)
		resp, err := a.etcd.Get(lctx, records.ForcePrefix, clientv3.WithPrefix())
		lcancel()
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		a.forced.reset(resp.Kvs)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range a.etcd.Watch(etcdauth.WatchContext(wctx), records.ForcePrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				if !records.IsForceKey(k) {
					continue
				}
				switch ev.Type {
				case clientv3.EventTypePut:
					a.forced.put(k, ev.Kv.Value)
				case clientv3.EventTypeDelete:
					a.forced.delete(k)
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
