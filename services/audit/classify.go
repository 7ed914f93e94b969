package audit

import (
	"strconv"
	"strings"
	"time"

	epochpkg "github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"github.com/lockplane/lockplane/services/shardmap"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ForcePrefix is where a force-release writes its record, in the Txn that
// deletes the hold (records.ForcePrefix).
const ForcePrefix = records.ForcePrefix

// revision is the etcd events of one revision: one Txn, one lease's end,
// or one put. etcd never splits a revision across watch responses.
type revision struct {
	rev    int64
	events []*clientv3.Event
}

// classify turns one revision's events into audit events. A revision says
// by itself how each hold it deletes ended, because of what else it holds:
//   - a lease's end (expiry or revoke) deletes every key on the lease at
//     one revision, the session record /s/<lease> with the holds;
//   - a close first puts /sc/<lease> on the lease, so a closed session's
//     end deletes that mark too, and an expiry's does not;
//   - a force-release puts its /sys/force/<id> record in the deleting Txn,
//     which is the Detail of every event it makes (each hold's end, and
//     with revoke_session the session record's);
//   - an epoch advance writes a new epoch into /sys/epoch and deletes
//     every hold, waiter and session record in one Txn: the sessions it
//     ends are part of its epoch_advance event, not ends of their own (a
//     row is keyed by revision and key, and the advance's has key "");
//   - a Release deletes the hold alone.
func classify(src source, r revision, epoch uint32, now time.Time) []Event {
	ended := map[int64]bool{}   // leases whose session record goes here
	closing := map[int64]bool{} // leases whose closing mark goes here
	forced, advanced := false, false
	var forceDetail string // the force record: who asked, who approved, why
	var endedLease int64   // one lease ends per revision: a revoke or an expiry (an advance ends many)
	for _, ev := range r.events {
		k := string(ev.Kv.Key)
		switch {
		case k == lockkey.EpochKey:
			advanced = advanced || advances(ev)
		case ev.Type == mvccpb.DELETE && strings.HasPrefix(k, lockkey.SessionPrefix):
			if id, ok := leaseOf(k, lockkey.SessionPrefix); ok {
				ended[id], endedLease = true, id
			}
		case ev.Type == mvccpb.DELETE && strings.HasPrefix(k, lockkey.ClosingPrefix):
			if id, ok := leaseOf(k, lockkey.ClosingPrefix); ok {
				closing[id] = true
			}
		case ev.Type == mvccpb.PUT && records.IsForceKey(k):
			forced, forceDetail = true, string(ev.Kv.Value)
		}
	}
	endOf := func(lease int64) Kind {
		switch {
		case advanced:
			return EpochAdvance
		case forced:
			return ForceRelease
		case !ended[lease]:
			return Release
		case closing[lease]:
			return SessionClose
		default:
			return Expiry
		}
	}
	if advanced {
		endedLease = 0 // every session of the cluster: a hold's own is unknown without its value
	}
	base := Event{ClusterID: src.id, Cluster: src.name, Revision: r.rev, Epoch: epoch, At: now}
	var out []Event
	for _, ev := range r.events {
		k := string(ev.Kv.Key)
		e := base
		switch {
		case strings.HasPrefix(k, lockkey.HoldPrefix):
			e.Key = strings.TrimPrefix(k, lockkey.HoldPrefix)
			e.Namespace = lockkey.Namespace(e.Key)
			if ev.Type == mvccpb.PUT {
				h := decodeHold(ev.Kv.Value)
				e.Kind, e.Identity, e.Instance, e.Session, e.Class = Grant, h.Identity, h.Instance, ev.Kv.Lease, h.Class
				e.WaitedMs = max(h.WaitedMs, 0)
				if !h.Since.IsZero() {
					e.At = h.Since
				}
				if ev.IsModify() {
					e.Kind = Handoff
					if ev.PrevKv != nil {
						p := decodeHold(ev.PrevKv.Value)
						e.PrevIdentity, e.PrevSession, e.heldSince, e.heldClass = p.Identity, ev.PrevKv.Lease, p.Since, p.Class
					} else {
						e.Detail = unknownHolder
					}
				}
			} else if ev.PrevKv == nil {
				// Never skipped: the hold ended here, by the revision's
				// lease end if it has one; only whose it was is lost.
				e.Kind, e.Session, e.Detail = endOf(endedLease), endedLease, unknownHolder
			} else {
				h := decodeHold(ev.PrevKv.Value)
				e.Kind, e.Identity, e.Instance, e.Session, e.Class = endOf(ev.PrevKv.Lease), h.Identity, h.Instance, ev.PrevKv.Lease, h.Class
				e.heldSince = h.Since
			}
			if e.Kind == EpochAdvance && e.Detail == "" {
				e.Detail = "ended by the epoch advance at this revision"
			}
		case strings.HasPrefix(k, lockkey.SessionPrefix):
			lease, ok := leaseOf(k, lockkey.SessionPrefix)
			if !ok {
				continue
			}
			kv := ev.Kv
			e.Kind, e.Session = SessionOpen, lease
			if ev.Type == mvccpb.DELETE {
				if ev.PrevKv == nil || advanced {
					continue // an advance ended it: its event is the advance's
				}
				kv, e.Kind = ev.PrevKv, endOf(lease)
			} else if ev.IsModify() {
				continue // only created by OpenSession; a rewrite is no new session
			}
			s := decodeSession(kv.Value)
			e.Identity, e.Instance, e.TTLSeconds = s.Identity, s.Instance, max(s.TTLSeconds, 0)
		case k == lockkey.EpochKey:
			e.Kind = EpochAdvance
			if !advances(ev) {
				// The same epoch stamped with a new shard map version.
				e.Kind = ShardMove
			}
			if ev.Type == mvccpb.DELETE {
				e.Detail = "epoch record deleted: the cluster is sealed until an advance"
			} else {
				e.Detail = string(ev.Kv.Value)
			}
		case k == shardmap.Key:
			if ev.Type != mvccpb.PUT {
				continue
			}
			e.Kind, e.Detail = ShardMove, string(ev.Kv.Value)
		default:
			continue
		}
		if e.Kind == ForceRelease {
			// Every event of the revision, the revoked session's end too,
			// says who asked, who approved and why: the archive locks each
			// away. A compacted holder is still said to be unknown here;
			// the record names the holds and their session.
			if e.Detail == unknownHolder {
				e.Detail = forceDetail + " (" + unknownHolder + ")"
			} else {
				e.Detail = forceDetail
			}
		}
		out = append(out, e)
	}
	return out
}

// unknownHolder is the detail of an event whose replaced value etcd no
// longer had (compacted between the event and its read).
const unknownHolder = "the previous value was compacted: holder unknown"

// advances reports whether a write of the epoch record changes the epoch
// (an advance, or the record's deletion), not just the shard map version
// stamped into it.
func advances(ev *clientv3.Event) bool {
	if ev.Type == mvccpb.DELETE || ev.PrevKv == nil {
		return true
	}
	cur, err1 := epochpkg.Decode(ev.Kv.Value, ev.Kv.ModRevision)
	prev, err2 := epochpkg.Decode(ev.PrevKv.Value, ev.PrevKv.ModRevision)
	return err1 != nil || err2 != nil || cur.Epoch != prev.Epoch
}

func leaseOf(key, prefix string) (int64, bool) {
	u, err := strconv.ParseUint(strings.TrimPrefix(key, prefix), 16, 64)
	return int64(u), err == nil
}

// decodeHold and decodeSession read what they can: a record audit cannot
// decode still yields its event, with the fields left empty.
// The arbiter writes them (services/lockkey/records, one definition for
// both); audit reports only some of their fields.
func decodeHold(b []byte) records.Hold {
	h, _ := records.DecodeHold(b)
	return h
}

func decodeSession(b []byte) records.Session {
	s, _ := records.DecodeSession(b)
	return s
}
