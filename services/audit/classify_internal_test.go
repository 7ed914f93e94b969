package audit

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Revisions as the arbiter and etcd write them, and what each says; the
// tailer's tests against a real cluster cover the common endings.
func TestClassifyReadsEachRevisionAlone(t *testing.T) {
	hold := func(id string, lease int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(lockkey.HoldKey("team-a/k")), Value: []byte(`{"identity":"` + id + `","class":"default"}`), Lease: lease}
	}
	epochRec := func(e int) []byte {
		return []byte(`{"epoch":` + string(rune('0'+e)) + `,"cluster_id":"c","map_version":0}`)
	}
	put := func(kv, prev *mvccpb.KeyValue) *clientv3.Event {
		kv.ModRevision, kv.Version = 9, 2
		if prev == nil {
			kv.Version = 1
		}
		return &clientv3.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev}
	}
	del := func(key string, prev *mvccpb.KeyValue) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: 9}, PrevKv: prev}
	}
	session := func(lease int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(lockkey.SessionKey(lease)), Value: []byte(`{"identity":"a"}`), Lease: lease}
	}
	epochKV := func(e int) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(lockkey.EpochKey), Value: epochRec(e)}
	}
	handoff := put(hold("b", 8), nil)
	handoff.Kv.Version = 2 // a modify whose previous value is gone
	for _, c := range []struct {
		name   string
		events []*clientv3.Event
		want   map[string]Kind // key ("" for cluster and session events) -> kind
		detail bool            // the hold's event says its holder is unknown
	}{
		{"an advance deletes holds", []*clientv3.Event{put(epochKV(3), epochKV(2)), del(lockkey.HoldKey("team-a/k"), hold("a", 7))},
			map[string]Kind{"": EpochAdvance, "team-a/k": EpochAdvance}, false},
		{"a stamp is no advance", []*clientv3.Event{put(epochKV(2), epochKV(2))}, map[string]Kind{"": ShardMove}, false},
		{"a release without its old value", []*clientv3.Event{del(lockkey.HoldKey("team-a/k"), nil)},
			map[string]Kind{"team-a/k": Release}, true},
		{"an expiry without the hold's old value", []*clientv3.Event{del(lockkey.HoldKey("team-a/k"), nil), del(lockkey.SessionKey(7), session(7))},
			map[string]Kind{"team-a/k": Expiry, "": Expiry}, true},
		{"a handoff without its old value", []*clientv3.Event{handoff}, map[string]Kind{"team-a/k": Handoff}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := classify(source{name: "coord", id: "c"}, revision{rev: 9, events: c.events}, 2, time.Unix(0, 0))
			if len(got) != len(c.want) {
				t.Fatalf("events %+v, want %v", got, c.want)
			}
			for _, e := range got {
				if c.want[e.Key] != e.Kind {
					t.Errorf("%q: %s, want %s", e.Key, e.Kind, c.want[e.Key])
				}
				if e.Key != "" && c.detail != (e.Detail == unknownHolder) {
					t.Errorf("%q: detail %q", e.Key, e.Detail)
				}
			}
		})
	}
}

// A grant's or handoff's hold record says how long its request waited; a
// record written before the field, or by a grant that did not wait, has
// none, and the event says 0.
func TestClassifyCarriesTheWait(t *testing.T) {
	for value, want := range map[string]int64{
		`{"identity":"a","class":"default","since":"2026-01-02T03:04:05Z","waited_ms":250}`: 250,
		`{"identity":"a","class":"default","since":"2026-01-02T03:04:05Z"}`:                 0,
		`{"identity":"a","class":"default","waited_ms":-3}`:                                 0,
	} {
		for kind, created := range map[Kind]int64{Grant: 9, Handoff: 5} {
			kv := &mvccpb.KeyValue{Key: []byte(lockkey.HoldKey("team-a/k")), Value: []byte(value), Lease: 7, CreateRevision: created, ModRevision: 9}
			got := classify(source{name: "coord", id: "c"}, revision{rev: 9, events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: kv}}}, 2, time.Unix(0, 0))
			if len(got) != 1 || got[0].Kind != kind || got[0].WaitedMs != want || got[0].Identity != "a" {
				t.Errorf("%s (a %s): %+v, want waited %d ms", value, kind, got, want)
			}
		}
	}
}

// A session's events carry its lease's TTL from the session record, which
// the cost report's keepalive estimate needs.
func TestClassifyCarriesTheSessionTTL(t *testing.T) {
	rec := &mvccpb.KeyValue{Key: []byte(lockkey.SessionKey(7)), Value: []byte(`{"identity":"a","ttl_seconds":15}`), Lease: 7, CreateRevision: 9, ModRevision: 9}
	for name, ev := range map[string]*clientv3.Event{
		"open":   {Type: mvccpb.PUT, Kv: rec},
		"expiry": {Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: rec.Key, ModRevision: 9}, PrevKv: rec},
	} {
		got := classify(source{name: "coord", id: "c"}, revision{rev: 9, events: []*clientv3.Event{ev}}, 2, time.Unix(0, 0))
		if len(got) != 1 || got[0].TTLSeconds != 15 || got[0].Session != 7 || got[0].Key != "" {
			t.Errorf("%s: %+v, want the session's TTL of 15 s", name, got)
		}
	}
}

// An epoch advance deletes every session record of its cluster in its
// Txn: the sessions it ends are part of its one epoch_advance event (the
// cluster's row at that revision), not ends of their own, which would
// also take that row's key; a hold whose old value is gone names no
// session, since every session of the cluster ended at that revision.
func TestClassifyTellsTheSessionsAnAdvanceEndedAsPartOfIt(t *testing.T) {
	sessionEnd := func(lease int64, closing bool) []*clientv3.Event {
		rec := &mvccpb.KeyValue{Key: []byte(lockkey.SessionKey(lease)), Value: []byte(`{"identity":"a","instance":"i","ttl_seconds":15}`), Lease: lease, CreateRevision: 4, ModRevision: 4}
		evs := []*clientv3.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: rec.Key, ModRevision: 9}, PrevKv: rec}}
		if closing {
			// A session being closed as the advance commits: its mark goes too.
			evs = append(evs, &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(lockkey.ClosingKey(lease)), ModRevision: 9},
				PrevKv: &mvccpb.KeyValue{Key: []byte(lockkey.ClosingKey(lease)), Lease: lease}})
		}
		return evs
	}
	prev := &mvccpb.KeyValue{Key: []byte(lockkey.EpochKey), Value: []byte(`{"epoch":2,"cluster_id":"c"}`), ModRevision: 3}
	advance := &mvccpb.KeyValue{Key: []byte(lockkey.EpochKey), Value: []byte(`{"epoch":3,"cluster_id":"c"}`), ModRevision: 9, Version: 2}
	// etcd's order within the Txn: the epoch record, then the holds, the
	// waiters and the sessions; the sessions first too, to be sure.
	for name, order := range map[string]func(epoch, hold, sessions []*clientv3.Event) []*clientv3.Event{
		"as the advance writes it": func(e, h, s []*clientv3.Event) []*clientv3.Event { return append(append(e, h...), s...) },
		"sessions first":           func(e, h, s []*clientv3.Event) []*clientv3.Event { return append(append(s, h...), e...) },
	} {
		t.Run(name, func(t *testing.T) {
			epochEv := []*clientv3.Event{{Type: mvccpb.PUT, Kv: advance, PrevKv: prev}}
			holdEv := []*clientv3.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(lockkey.HoldKey("team-a/k")), ModRevision: 9}}}
			sessions := append(sessionEnd(7, false), sessionEnd(8, true)...)
			got := classify(source{name: "coord", id: "c"}, revision{rev: 9, events: order(epochEv, holdEv, sessions)}, 2, time.Unix(0, 0))
			rows := map[string]Event{}
			for _, e := range got {
				if _, dup := rows[e.Key]; dup {
					t.Errorf("two events keyed %q at revision 9 (the store keeps one): %+v", e.Key, got)
				}
				rows[e.Key] = e
			}
			if len(got) != 2 {
				t.Fatalf("events %+v, want the advance and its hold's end", got)
			}
			if adv := rows[""]; adv.Kind != EpochAdvance || adv.Session != 0 || adv.Detail != string(advance.Value) {
				t.Errorf("the cluster's event %+v, want the advance with its record", adv)
			}
			if h := rows["team-a/k"]; h.Kind != EpochAdvance || h.Session != 0 || h.Detail != unknownHolder {
				t.Errorf("the hold without its old value: %+v, want ended by the advance, no session named, its holder unknown", h)
			}
		})
	}
}

// A force-release with revoke_session deletes the session's holds and its
// session record and puts the force record, in one Txn (approveForce): every
// event of that revision, the session's end included, is a force_release
// carrying the force record, so whichever of them is kept says who asked,
// who approved and why (issue 32). A hold whose old value was compacted
// names no holder; the force record names it.
func TestClassifyGivesEveryEventOfARevokedSessionTheForceRecord(t *testing.T) {
	const force = `{"action":"a1","kind":"force_release","requester":"alice","approver":"bob","reason":"stuck job","session":7,"revoke_session":true}`
	hold := func(key string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(lockkey.HoldKey(key)), Value: []byte(`{"identity":"a","class":"default"}`), Lease: 7, CreateRevision: 4, ModRevision: 4}
	}
	del := func(key []byte, prev *mvccpb.KeyValue) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: key, ModRevision: 9}, PrevKv: prev}
	}
	session := &mvccpb.KeyValue{Key: []byte(lockkey.SessionKey(7)), Value: []byte(`{"identity":"a","ttl_seconds":15}`), Lease: 7, CreateRevision: 3, ModRevision: 3}
	// In the Txn's order: the holds, the session record, the force record.
	events := []*clientv3.Event{
		del([]byte(lockkey.HoldKey("team-a/k1")), hold("team-a/k1")),
		del([]byte(lockkey.HoldKey("team-a/k2")), hold("team-a/k2")),
		del([]byte(lockkey.HoldKey("team-a/k3")), nil),
		del(session.Key, session),
		{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(ForcePrefix + "a1"), Value: []byte(force), Lease: 99, CreateRevision: 9, ModRevision: 9, Version: 1}},
	}
	got := classify(source{name: "coord", id: "c"}, revision{rev: 9, events: events}, 2, time.Unix(0, 0))
	keys := map[string]bool{}
	for _, e := range got {
		keys[e.Key] = true
		want := force
		if e.Key == "team-a/k3" { // compacted: the holder is still said to be unknown
			want = force + " (" + unknownHolder + ")"
		}
		if e.Kind != ForceRelease || e.Detail != want {
			t.Errorf("%q (session %d): %s with detail %q; want force_release with the force record", e.Key, e.Session, e.Kind, e.Detail)
		}
	}
	if len(got) != 4 || !keys[""] || !keys["team-a/k1"] || !keys["team-a/k2"] || !keys["team-a/k3"] {
		t.Fatalf("events %+v; want the three holds' ends and the session's", got)
	}
}
