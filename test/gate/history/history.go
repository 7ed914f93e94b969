// Package history is the record of one release-gate run: every client
// operation with its invoke and return times, read from CLOCK_MONOTONIC
// (one clock for every process on the host), and its outcome. An operation
// whose outcome the client did not observe is recorded as Unknown: it may
// or may not have taken effect.
//
// Histories hold tokens: they are evidence from test clusters, never logs
// of a real deployment.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Kind is what an operation did.
type Kind string

// The operations a workload client records.
const (
	// Acquire: Token is the grant's token when Result is OK.
	Acquire Kind = "acquire"
	// Release of the grant named by Token.
	Release Kind = "release"
	// Read of the fenced record: Value and Mark are what it held.
	Read Kind = "read"
	// Write of the fenced record under Token: Value is the whole new value.
	Write Kind = "write"
	// Start of a unit of work while CanStart was true (an instant: Call ==
	// Return), under the hold named by Token.
	Start Kind = "start"
	// Session: the client's locker opened session Session during a call
	// that began at Call (a new session replaces a fenced one).
	Session Kind = "session"
	// Close of session Session when the client finished: OK only if the
	// session was live and the service confirmed the close, so none of
	// its holds may remain.
	Close Kind = "close"
	// Inspect of Key after a refused Acquire on Session: Holder is the
	// session the service reported holding the key (0: free) at Return,
	// having polled since Call, and Since when that hold was granted.
	Inspect Kind = "inspect"
	// Fenced: the client library ran the OnFence of the grant named by
	// Token (an instant): the service reported it ended under its holder
	// (force-released), or the lease's deadline passed.
	Fenced Kind = "fenced"
	// ForceRelease is recorded by the runner, not a client (Client is
	// Operators): two operators force-released the hold of Key on session
	// Session at hold revision Revision (the revision part of its token),
	// in a Txn at revision ReleasedAt. Call and Return bound the approval;
	// Result is OK only if the approval ended that hold.
	ForceRelease Kind = "force-release"
	// Steal is an adversary's Release of another identity's hold of Key
	// (traffic's thief): Session (and Holder) the victim's session, Token
	// the victim's token as the thief learnt it (0: released with
	// any_token). OK only when the service answered released: an
	// identity ended a session it did not open.
	Steal Kind = "steal"
	// StealRenew is the thief's KeepAlive of the victim's session: OK
	// when the service renewed a session for an identity that did not
	// open it.
	StealRenew Kind = "steal-renew"
)

// Operators is the Client of the operators' ops (ForceRelease): not a
// workload client.
const Operators = -1

// Result is an operation's outcome.
type Result string

// Outcomes.
const (
	OK      Result = "ok"
	Stale   Result = "stale"   // the fence refused the token
	Refused Result = "refused" // the lock service refused (contended, no quorum, ...)
	Unknown Result = "unknown" // not observed: may or may not have happened
)

// Op is one operation.
type Op struct {
	Client  int      `json:"client"`
	Session int64    `json:"session,omitempty"`
	Key     string   `json:"key"`
	Kind    Kind     `json:"kind"`
	Call    int64    `json:"call"`
	Return  int64    `json:"return"`
	Result  Result   `json:"result"`
	Token   uint64   `json:"token,omitempty"`
	Value   []string `json:"value,omitempty"`
	Mark    uint64   `json:"mark,omitempty"`
	Holder  int64    `json:"holder,omitempty"`
	// Since is an Inspect's holder's grant time (CLOCK_MONOTONIC ns, from
	// the hold record's wall-clock time); 0 if unknown.
	Since int64 `json:"since,omitempty"`
	// Revision is a ForceRelease's hold revision; ReleasedAt the etcd
	// revision of the approval's Txn that deleted the hold: every grant
	// made after it on that cluster has a token of a higher revision.
	Revision   int64 `json:"revision,omitempty"`
	ReleasedAt int64 `json:"released_at,omitempty"`
	// Reason is a refusal's lockplane.lock.v1 reason (NO_QUORUM, ...);
	// empty when the service gave none (a transport error, the caller's
	// own deadline).
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Class is the class an Acquire named, when the workload varies it
	// (the two-tier workload): the class picks the cluster on an arbiter
	// that lets the request decide.
	Class string `json:"class,omitempty"`
}

// Now reads CLOCK_MONOTONIC in nanoseconds. Go's own monotonic readings
// are per process; this one is comparable across the host's processes.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("history: CLOCK_MONOTONIC: %v", err))
	}
	return ts.Nano()
}

// Recorder appends operations to a JSON-lines stream, one per client.
type Recorder struct {
	mu  sync.Mutex
	enc *json.Encoder
	w   *bufio.Writer
}

// NewRecorder records to w.
func NewRecorder(w io.Writer) *Recorder {
	bw := bufio.NewWriter(w)
	return &Recorder{enc: json.NewEncoder(bw), w: bw}
}

// Record appends op and flushes it, so a killed client loses nothing it
// recorded.
func (r *Recorder) Record(op Op) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enc.Encode(op); err != nil {
		return err
	}
	return r.w.Flush()
}

// Load reads and merges the histories of several clients.
func Load(paths ...string) ([]Op, error) {
	var ops []Op
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var op Op
			if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
				// A client killed mid-line leaves a torn last line.
				continue
			}
			ops = append(ops, op)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return ops, nil
}
