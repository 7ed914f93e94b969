package arbiter

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// holdRecord and sessionRecord are the values of hold and session keys,
// defined once in services/lockkey/records, which audit decodes too.
type (
	holdRecord    = records.Hold
	sessionRecord = records.Session
)

func holdFor(r request, session int64) holdRecord {
	h := holdRecord{Identity: r.caller.String(), Instance: r.instance, Session: session, Class: r.class.Name, Since: time.Now().UTC(), CoordSession: r.coordSession, Grant: r.grant}
	if !r.waitingSince.IsZero() {
		// Monotonic, and at least 1 ms: 0 would read as no wait.
		h.WaitedMs = max(waited(r, time.Now()).Milliseconds(), 1)
	}
	return h
}

// waited is how long r has waited at now: since this call found the key
// held, or since its session first queued for it if that is earlier (a
// durable waiter's retried Acquire). The queue record's time is another
// arbiter's wall clock, so it is clamped to [0, now]: a clock ahead of
// this one's counts no wait, not a negative one.
func waited(r request, now time.Time) time.Duration {
	d := now.Sub(r.waitingSince)
	if !r.queuedAt.IsZero() {
		first := r.queuedAt
		if first.Before(time.Unix(0, 0)) {
			first = time.Unix(0, 0)
		}
		if first.After(now) {
			first = now
		}
		d = max(d, now.Sub(first))
	}
	return d
}

func sessionFor(id spiffeid.ID, ttl time.Duration, instance string) sessionRecord {
	return sessionRecord{Identity: id.String(), Instance: instance, TTLSeconds: int64(ttl / time.Second)}
}

// heldBySameProcess reports whether a hold's value names the caller's own
// process: the same identity and the same, non-empty, instance. An empty
// instance (a client that sends none) is never the same process.
// grantOf reports whether hold, found on session's lease, was written by
// r's own Acquire call: a grant of r's (its own earlier attempt, or a
// handoff to it) that it had not yet heard of.
func grantOf(hold []byte, r request) bool {
	h, err := decodeHold(hold)
	return err == nil && r.grant != "" && h.Grant == r.grant
}

// newGrantName names one Acquire call: 128 random bits, unique in
// practice across calls, arbiters and restarts.
func newGrantName() string {
	return strconv.FormatUint(rand.Uint64(), 36) + "." + strconv.FormatUint(rand.Uint64(), 36)
}

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
		return refuse.InvalidArgument("instance", fmt.Sprintf("is %d bytes; at most %d", len(s), maxInstance))
	}
	for _, c := range []byte(s) {
		if !lockkey.SegmentByte(c) {
			return refuse.InvalidArgument("instance", "may hold only A-Z, a-z, 0-9, '.', '_' and '-'")
		}
	}
	return nil
}

func decodeHold(b []byte) (holdRecord, error) { return records.DecodeHold(b) }

func decodeSession(b []byte) (sessionRecord, error) { return records.DecodeSession(b) }
