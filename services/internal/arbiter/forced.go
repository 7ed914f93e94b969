package arbiter

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// forceRecordTTL is how long a force record lives on its cluster, on a
// lease: long enough for the audit tailer to copy it (ADR-21) and for any
// holder that was partitioned to hear of it at its next keepalive.
const forceRecordTTL = 24 * time.Hour

// maxForced caps the ended holds one cluster's arbiter remembers: past
// it the oldest are forgotten first. Force-releases are rare and
// two-person; the cap only bounds memory against a flood.
const maxForced = 10000

// forceRecord is the value of /sys/force/<id> on the ended holds'
// cluster, put in the Txn that deleted them. Never a token: a hold's
// revision is there, as the audit log has it, not its epoch.
type forceRecord struct {
	Action    string `json:"action"`
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	Cluster   string `json:"cluster"`
	Requester string `json:"requester"`
	Approver  string `json:"approver"`
	Reason    string `json:"reason"`
	Class     string `json:"class"`
	// Enforcement is the class's (fenced, advisory), or "unknown".
	Enforcement   string       `json:"enforcement"`
	Identity      string       `json:"identity"`
	Instance      string       `json:"instance,omitempty"`
	Session       int64        `json:"session"`
	RevokeSession bool         `json:"revoke_session,omitempty"`
	Holds         []forcedHold `json:"holds"`
	At            time.Time    `json:"at"`
}

// forcedHold is one hold a force-release ended.
type forcedHold struct {
	Key      string `json:"key"`
	Session  int64  `json:"session"`
	Revision int64  `json:"revision"`
}

func (r forceRecord) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

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
	var r forceRecord
	if json.Unmarshal(value, &r) != nil {
		return
	}
	until := time.Now().Add(forceRecordTTL)
	if !r.At.IsZero() {
		until = r.At.Add(forceRecordTTL)
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
		if isForceRecord(string(kv.Key)) {
			f.put(string(kv.Key), kv.Value)
		}
	}
}

// isForceRecord tells a force record from a pending action, which lives
// under the same prefix on the coord cluster.
func isForceRecord(key string) bool {
	return strings.HasPrefix(key, audit.ForcePrefix) && !strings.HasPrefix(key, actionPrefix)
}

// watchForced keeps a.forced current until ctx ends: a listing, then a
// watch from the listing's revision, listed again whenever the watch ends
// (a compaction, a leader loss).
func (a *Arbiter) watchForced(ctx context.Context) {
	for ctx.Err() == nil {
		lctx, lcancel := a.opCtx(ctx)
		resp, err := a.etcd.Get(lctx, audit.ForcePrefix, clientv3.WithPrefix())
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
		for wr := range a.etcd.Watch(wctx, audit.ForcePrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				if !isForceRecord(k) {
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
