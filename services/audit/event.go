// Package audit turns a cluster's etcd log into the history of its locks:
// who held which key, from when, and how each hold ended. History is read
// from etcd's own revisions, never dual-written by the arbiter, so a hold
// that ended by lease expiry (committed by etcd, seen by no application
// code) is in it like any other.
package audit

import "time"

// Kind is what happened at one revision to one key.
type Kind string

const (
	// Grant: a hold created on a free key.
	Grant Kind = "grant"
	// Handoff: a hold overwritten by the next waiter's, in one Txn.
	Handoff Kind = "handoff"
	// Release: a hold deleted by its holder's Release.
	Release Kind = "release"
	// SessionClose: a hold ended because its holder closed the session.
	SessionClose Kind = "session_close"
	// Expiry: a hold ended because its session's lease expired: the
	// holder stopped renewing (ADR-22's client-health signal).
	Expiry Kind = "expiry"
	// ForceRelease: a hold ended by two operators (lockctl force-release);
	// the Detail of every event of that revision (each hold's, and a
	// revoked session's) is the /sys/force record put in the same Txn:
	// requester, approver, reason, class and enforcement.
	ForceRelease Kind = "force_release"
	// EpochAdvance: the cluster's epoch record was written.
	EpochAdvance Kind = "epoch_advance"
	// ShardMove: the shard map was written.
	ShardMove Kind = "shard_move"
	// SessionOpen: a session record was created.
	SessionOpen Kind = "session_open"
	// Gap: revisions the tailer could not read (compacted before it got
	// there); Revision is where the gap ends, Detail says where it began.
	Gap Kind = "gap"
)

// Event is one row of audit history, keyed by (ClusterID, Revision, Key):
// replaying a revision writes the same row again, which the store
// deduplicates.
type Event struct {
	// ClusterID is the etcd cluster ID (hex) the revision belongs to;
	// Cluster is its name in the region (coord, or a shard's).
	ClusterID string `json:"cluster_id"`
	Cluster   string `json:"cluster"`
	Revision  int64  `json:"revision"`
	Key       string `json:"key"` // the lock key; empty for cluster events
	Kind      Kind   `json:"kind"`
	// At is when it happened: the hold's grant time (the arbiter's clock)
	// for grants and handoffs; for the rest, when the tailer read the
	// revision, which trails it by the tailer's lag. etcd keeps no time.
	At        time.Time `json:"at"`
	Namespace string    `json:"namespace"`
	Class     string    `json:"class"`
	// Identity, Instance and Session are the holder's: the new holder's
	// for grants and handoffs, the ending hold's otherwise.
	Identity string `json:"identity"`
	Instance string `json:"instance"`
	Session  int64  `json:"session"`
	// PrevIdentity and PrevSession are the hold a handoff replaced.
	PrevIdentity string `json:"prev_identity"`
	PrevSession  int64  `json:"prev_session"`
	// WaitedMs is how long a grant's or handoff's request waited for the
	// key, in milliseconds (at least 1), from the hold record the grant
	// wrote; 0 when it did not wait, or its arbiter did not record waits.
	WaitedMs int64 `json:"waited_ms"`
	// TTLSeconds is a session's lease TTL, on its own events (session_open
	// and the session_close or expiry of its record), from the session
	// record; 0 elsewhere. The cost report estimates keepalives from it.
	TTLSeconds int64 `json:"ttl_seconds"`
	// Epoch is the cluster's epoch at the revision (0 when unknown).
	Epoch uint32 `json:"epoch"`
	// Detail is free text for kinds that need it (a gap's range, an
	// epoch record, a shard map version). Never a token.
	Detail string `json:"detail"`
	// heldSince is, on a hold's end, when that hold was granted (its
	// record's since), for the hold-time series; heldClass is a handoff's
	// previous hold's class. Not stored.
	heldSince time.Time
	heldClass string
}

// ClusterWide reports whether e is a whole cluster's event (no key): a
// gap, an epoch advance or a shard move. ByKey and ByNamespaceClass answer
// them beside the subject's events, outside its limit.
func (e Event) ClusterWide() bool {
	return e.Key == "" && (e.Kind == Gap || e.Kind == EpochAdvance || e.Kind == ShardMove)
}
