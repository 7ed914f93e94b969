// Package records defines the values stored at hold, session and force keys.
//
// They are the values the arbiter writes at a hold key (/l/<key>), a
// session key (/s/<lease>) and a force record (/sys/force/<action>): one
// definition, which the arbiter encodes and
// compares and the audit tailer decodes, so the two never drift apart. A
// force record is written by the Admin API (services/internal/arbiter/admin)
// and read by the lock core, whose keepalives report the holds it ended.
package records

import (
	"encoding/json"
	"strings"
	"time"
)

// Hold is the value of a hold key: who holds it, on which session, in
// which class, since when, and how long its request waited for it. Never
// the token: the token is the revision of the hold's last write (only
// grants write holds: a plain grant creates the key, a handoff overwrites
// it with the next holder's), so it need not be stored.
type Hold struct {
	Identity string    `json:"identity"`
	Instance string    `json:"instance,omitempty"`
	Session  int64     `json:"session"`
	Class    string    `json:"class"`
	Since    time.Time `json:"since"`
	// WaitedMs is how long the request waited before this grant, in ms,
	// at least 1; absent when it did not wait (and in records written
	// before waits were recorded). It rides in the grant's own write, so
	// audit sees waits without a second write (services/audit).
	WaitedMs int64 `json:"waited_ms,omitempty"`
	// CoordSession is, on an entity shard, the coord session whose shard
	// lease holds the key (Session and the key's lease are that lease):
	// LEAKED and Inspect name it from this read alone. Absent elsewhere
	// and in holds written before shards recorded it.
	CoordSession int64 `json:"coord_session,omitempty"`
	// Grant names the Acquire call that wrote the hold (random, unique per
	// call): only that call may take the hold as its own grant. Another
	// Acquire of the same session finding it is told LEAKED, never given
	// it, so an Acquire whose caller has gone cannot claim, and then end,
	// a hold its session was granted since. Absent in holds written
	// before grants were named.
	Grant string `json:"grant,omitempty"`
}

// Session is the value of a session key, on the session's lease. Grants
// compare it byte for byte, which proves in the grant Txn itself that the
// session is alive, is the caller's, and has the class's TTL: so its
// encoding must never change for the same fields.
type Session struct {
	Identity string `json:"identity"`
	// Instance is the client process's ID; omitted when empty, so a
	// record without one encodes as records did before instances.
	Instance   string `json:"instance,omitempty"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

// Encode is deterministic: the same fields always give the same bytes.
func (h Hold) Encode() string {
	b, _ := json.Marshal(h)
	return string(b)
}

// Encode is deterministic: the same owner and TTL always give the same
// bytes, which grants compare.
func (s Session) Encode() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// DecodeHold reads a hold key's value; fields it lacks stay zero.
func DecodeHold(b []byte) (Hold, error) {
	var h Hold
	err := json.Unmarshal(b, &h)
	return h, err
}

// DecodeSession reads a session key's value; fields it lacks stay zero.
func DecodeSession(b []byte) (Session, error) {
	var s Session
	err := json.Unmarshal(b, &s)
	return s, err
}

// ForcePrefix is where a force-release writes its record, in the Txn that
// deletes the holds: /sys/force/<action> on the holds' cluster.
// ActionPrefix, under it on the coord cluster, is where two-person
// requests live, so that the Admin API's etcd role (put under /sys/force)
// covers both; IsForceKey tells them apart.
const (
	ForcePrefix  = "/sys/force/"
	ActionPrefix = ForcePrefix + "req/"
)

// ForceTTL is how long a force record lives on its cluster, on a lease:
// long enough for the audit tailer to copy it (ADR-21) and for any holder
// that was partitioned to hear of it at its next keepalive.
const ForceTTL = 24 * time.Hour

// ForceKey is the force record of action id, on the ended holds' cluster.
func ForceKey(id string) string { return ForcePrefix + id }

// ActionKey is two-person request id's key on the coord cluster.
func ActionKey(id string) string { return ActionPrefix + id }

// IsForceKey tells a force record from a pending action, which lives
// under the same prefix on the coord cluster.
func IsForceKey(key string) bool {
	return strings.HasPrefix(key, ForcePrefix) && !strings.HasPrefix(key, ActionPrefix)
}

// Force is the value of a force record, put in the Txn that deleted the
// holds it names. Never a token: a hold's revision is there, as the audit
// log has it, not its epoch.
type Force struct {
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
	Holds         []ForcedHold `json:"holds"`
	At            time.Time    `json:"at"`
}

// ForcedHold is one hold a force-release ended.
type ForcedHold struct {
	Key      string `json:"key"`
	Session  int64  `json:"session"`
	Revision int64  `json:"revision"`
}

// Encode is the force record's value.
func (r Force) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// DecodeForce reads a force record's value.
func DecodeForce(b []byte) (Force, error) {
	var r Force
	err := json.Unmarshal(b, &r)
	return r, err
}
