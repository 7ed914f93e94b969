package audit

import (
	"context"
	"time"
)

// Reader answers the questions operators ask of the history: who held a
// key and how each hold ended; what an identity, or a namespace and class,
// did; which holds ended by expiry. Every answer is at most limit long,
// oldest first in history order: each cluster's events by revision (an
// event's time is an arbiter's clock or the tailer's reading, not
// monotonic in revisions, so time never orders a cluster's history), the
// clusters' histories merged by time, since clusters share no revisions.
//
// ByKey and ByNamespaceClass also answer the cluster events (gaps, epoch
// advances, shard moves: no key, Event.ClusterWide) in the window of the
// clusters the subject's events in it are on, or every cluster's gaps in
// it when it has none, so that a gap in a key's history is in its answer.
// They do not count against limit: the answer has the subject's first
// limit events and the cluster events among them (and after them, when
// the subject has no more).
type Reader interface {
	ByKey(ctx context.Context, key string, since time.Time, limit int) ([]Event, error)
	ByIdentity(ctx context.Context, identity string, since time.Time, limit int) ([]Event, error)
	// ByNamespaceClass takes an empty class as every class of ns.
	ByNamespaceClass(ctx context.Context, ns, class string, since time.Time, limit int) ([]Event, error)
	ExpiriesList(ctx context.Context, since time.Time, limit int) ([]Event, error)
	// Expiries counts holds ended by expiry per namespace and class.
	Expiries(ctx context.Context, since time.Time) ([]ExpiryCount, error)
	Contention(ctx context.Context, since time.Time) ([]Contention, error)
	Cost(ctx context.Context, since time.Time) ([]Cost, error)
	// GrantsByClass counts the holds each class began.
	GrantsByClass(ctx context.Context, since time.Time) (map[string]int64, error)
}

// ExpiryCount is how many holds of a namespace and class ended by expiry:
// holders that stopped renewing without releasing (ADR-22).
type ExpiryCount struct {
	Namespace string `json:"namespace"`
	Class     string `json:"class"`
	Count     int64  `json:"count"`
}

// Contention is how a namespace and class's holds began and ended, and
// how long they lasted.
type Contention struct {
	Namespace string `json:"namespace"`
	Class     string `json:"class"`
	Grants    int64  `json:"grants"`
	// Handoffs are holds given to a waiter in the releasing Txn: each is
	// a wait that ended in a grant.
	Handoffs int64 `json:"handoffs"`
	// Waits are the holds (grants and handoffs) whose request waited for
	// the key, and WaitP50ms and WaitP99ms how long (the hold record's
	// waited_ms): what contention costs the waiters.
	Waits     int64 `json:"waits"`
	WaitP50ms int64 `json:"wait_p50_ms"`
	WaitP99ms int64 `json:"wait_p99_ms"`
	Releases  int64 `json:"releases"`
	Expiries  int64 `json:"expiries"`
	Holds     int64 `json:"holds"` // holds that ended, timed below
	HoldP50ms int64 `json:"hold_p50_ms"`
	HoldP99ms int64 `json:"hold_p99_ms"`
	HoldMaxms int64 `json:"hold_max_ms"`
}

// Cost is what one identity asked of the lock log.
type Cost struct {
	Identity string `json:"identity"`
	Sessions int64  `json:"sessions"`
	Holds    int64  `json:"holds"`
	Writes   int64  `json:"writes"`
	// KeepalivesEstimated is estimated, not counted: keepalives write no
	// revision. Each lease of a session opened in the window (on each
	// cluster) is taken to be renewed as lockclient does, at once and then
	// every TTL/3, from its open to its close, to a TTL before its expiry,
	// or to now while open. lockplane_renewals_total counts them, per
	// cluster and without identities.
	KeepalivesEstimated int64 `json:"keepalives_estimated"`
}
