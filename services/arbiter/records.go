package arbiter

import (
	"encoding/json"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// holdRecord is the value of a hold key: who holds it, on which session, in
// which class, since when. Never the token: the token is the revision of
// the hold's last write (only grants write holds: a plain grant creates the
// key, a handoff overwrites it with the next holder's), so it need not be
// stored.
type holdRecord struct {
	Identity string    `json:"identity"`
	Session  int64     `json:"session"`
	Class    string    `json:"class"`
	Since    time.Time `json:"since"`
}

// sessionRecord is the value of a session key, on the session's lease.
// Grants compare it byte for byte, which proves in the grant Txn itself that
// the session is alive, is the caller's, and has the class's TTL.
type sessionRecord struct {
	Identity   string `json:"identity"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

// encode is deterministic: the same owner and TTL always give the same bytes.
func (r sessionRecord) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func holdFor(r request, session int64) holdRecord {
	return holdRecord{Identity: r.caller.String(), Session: session, Class: r.class.Name, Since: time.Now().UTC()}
}

func (h holdRecord) encode() string {
	b, _ := json.Marshal(h)
	return string(b)
}

func sessionFor(id spiffeid.ID, ttl time.Duration) sessionRecord {
	return sessionRecord{Identity: id.String(), TTLSeconds: int64(ttl / time.Second)}
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
