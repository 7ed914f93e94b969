// Package lockkey defines the syntax of lock keys and where they live in etcd.
//
// A key is "<namespace>/<path>": two or more segments separated by "/", each
// of letters, digits, ".", "_" or "-", none of them "." or "..", at most
// MaxLen bytes in all. The first segment is the tenant namespace, the unit of
// grants, metrics and homing. Keys are validated before any etcd call, so a
// bad key never reaches the log.
package lockkey

import (
	"fmt"
	"strings"
)

// MaxLen is the longest key accepted, in bytes.
const MaxLen = 512

// Rule names a syntax rule a key can break. Errors carry it so callers can
// act on it without parsing text.
type Rule string

// The syntax rules.
const (
	RuleEmpty      Rule = "non-empty"
	RuleTooLong    Rule = "max-length"
	RuleCharacters Rule = "characters"
	RuleSegments   Rule = "namespace-and-path"
	RuleEmptySeg   Rule = "no-empty-segment"
	RuleDotSeg     Rule = "no-dot-segment"
)

// Error reports a key that breaks a rule.
type Error struct {
	Key  string
	Rule Rule
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("key breaks rule %q: %s", e.Rule, e.Msg) }

// Validate returns nil or an *Error naming the first rule the key breaks.
// The message never quotes the key, which may be long or hostile.
func Validate(key string) error {
	switch {
	case key == "":
		return &Error{key, RuleEmpty, "the key is empty"}
	case len(key) > MaxLen:
		return &Error{key, RuleTooLong, fmt.Sprintf("the key is %d bytes; at most %d are allowed", len(key), MaxLen)}
	}
	for i := 0; i < len(key); i++ {
		if !allowed(key[i]) {
			return &Error{key, RuleCharacters, fmt.Sprintf("byte %d (%q) is not a letter, digit, '/', '.', '_' or '-'", i, key[i])}
		}
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		switch s {
		case "":
			return &Error{key, RuleEmptySeg, fmt.Sprintf("segment %d is empty (leading, trailing or doubled '/')", i+1)}
		case ".", "..":
			return &Error{key, RuleDotSeg, fmt.Sprintf("segment %d is %q", i+1, s)}
		}
	}
	if len(segs) < 2 {
		return &Error{key, RuleSegments, "a key is <namespace>/<path>: it needs at least two segments"}
	}
	return nil
}

func allowed(c byte) bool { return c == '/' || SegmentByte(c) }

// SegmentByte reports whether c may stand in a key segment: a letter, a
// digit, '.', '_' or '-'. Other names the service stores and shows as
// they are (a client's instance) keep to the same bytes.
func SegmentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// Namespace is the first segment of a valid key.
func Namespace(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	return ns
}

// The etcd key space. Holds live under HoldPrefix, durable waiters under
// WaitPrefix, sessions under SessionPrefix, and the epoch record at EpochKey.
const (
	HoldPrefix    = "/l/"
	WaitPrefix    = "/q/"
	SessionPrefix = "/s/"
	ClosingPrefix = "/sc/"
	EpochKey      = "/sys/epoch"
)

// HoldKey is the etcd key that holds a grant of key.
func HoldKey(key string) string { return HoldPrefix + key }

// WaitersOf is the etcd prefix of key's durable waiters. '#' cannot occur
// in a key, so the waiters of a/b never include those of a/b/c.
func WaitersOf(key string) string { return WaitPrefix + key + "#" }

// WaitKey is the etcd key of one session's durable wait for key, on the
// session's lease.
func WaitKey(key string, session int64) string {
	return fmt.Sprintf("%s%016x", WaitersOf(key), uint64(session))
}

// ShardLeasesOf is the coord cluster's prefix of a session's leases on
// entity shards: a session holds on a shard through a lease of its own
// there, listed here on the session's coord lease.
func ShardLeasesOf(session int64) string { return fmt.Sprintf("/sl/%016x/", uint64(session)) }

// ShardLeaseKey records session's lease on shard.
func ShardLeaseKey(session int64, shard string) string { return ShardLeasesOf(session) + shard }

// ShardLeaseOwner records, on the coord cluster, which session a lease on
// shard belongs to. Arbiters now read the session from the shard's hold
// record (it records its coord session), so an ended session is still
// named; the record is kept for arbiters of earlier releases, which read
// it, during a rolling upgrade.
func ShardLeaseOwner(shard string, lease int64) string {
	return fmt.Sprintf("/slo/%s/%016x", shard, uint64(lease))
}

// SessionKey is the etcd key that records a session's owner, on its lease.
func SessionKey(id int64) string { return fmt.Sprintf("%s%016x", SessionPrefix, uint64(id)) }

// ClosingKey marks, on a lease, that its session is being closed: the
// lease's end then deletes it with the holds, which is how the log tells a
// closed session from an expired one.
func ClosingKey(id int64) string { return fmt.Sprintf("%s%016x", ClosingPrefix, uint64(id)) }
