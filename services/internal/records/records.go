// Package records defines the values the arbiter writes at a hold key
// (/l/<key>) and a session key (/s/<lease>): one definition, which the
// arbiter encodes and compares and the audit tailer decodes, so the two
// never drift apart.
package records

import (
	"encoding/json"
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
