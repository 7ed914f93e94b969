package arbiter

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// holdRecord is the value of a hold key: who holds it, on which session, in
// which class, since when, and how long its request waited for it. Never
// the token: the token is the revision of the hold's last write (only
// grants write holds: a plain grant creates the key, a handoff overwrites
// it with the next holder's), so it need not be stored.
type holdRecord struct {
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

// sessionRecord is the value of a session key, on the session's lease.
// Grants compare it byte for byte, which proves in the grant Txn itself that
// the session is alive, is the caller's, and has the class's TTL.
type sessionRecord struct {
	Identity string `json:"identity"`
	// Instance is the client process's ID; omitted when empty, so a
	// record without one encodes as records did before instances.
	Instance   string `json:"instance,omitempty"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

// encode is deterministic: the same owner and TTL always give the same bytes.
func (r sessionRecord) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func holdFor(r request, session int64) holdRecord {
	h := holdRecord{Identity: r.caller.String(), Instance: r.instance, Session: session, Class: r.class.Name, Since: time.Now().UTC(), CoordSession: r.coordSession}
	if !r.waitingSince.IsZero() {
		// Monotonic, and at least 1 ms: 0 would read as no wait.
		h.WaitedMs = max(time.Since(r.waitingSince).Milliseconds(), 1)
	}
	return h
}

func (h holdRecord) encode() string {
	b, _ := json.Marshal(h)
	return string(b)
}

func sessionFor(id spiffeid.ID, ttl time.Duration, instance string) sessionRecord {
	return sessionRecord{Identity: id.String(), Instance: instance, TTLSeconds: int64(ttl / time.Second)}
}

// heldBySameProcess reports whether a hold's value names the caller's own
// process: the same identity and the same, non-empty, instance. An empty
// instance (a client that sends none) is never the same process.
func heldBySameProcess(hold []byte, r request) bool {
	h, err := decodeHold(hold)
	return err == nil && r.instance != "" && h.Instance == r.instance && h.Identity == r.caller.String()
}

// maxInstance bounds the instance a client names its process with.
const maxInstance = 64

// validInstance checks an instance ID: empty, or 1 to 64 characters of
// [A-Za-z0-9._-], so it can be stored, shown and compared as it is.
func validInstance(s string) error {
	if len(s) > maxInstance {
		return invalidArgument("instance", fmt.Sprintf("is %d bytes; at most %d", len(s), maxInstance))
	}
	for _, c := range []byte(s) {
		if !lockkey.SegmentByte(c) {
			return invalidArgument("instance", "may hold only A-Z, a-z, 0-9, '.', '_' and '-'")
		}
	}
	return nil
}

func decodeHold(b []byte) (holdRecord, error) {
	var h holdRecord
	err := json.Unmarshal(b, &h)
	return h, err
}

func decodeSession(b []byte) (sessionRecord, error) {
	var s sessionRecord
	err := json.Unmarshal(b, &s)
	return s, err
}
