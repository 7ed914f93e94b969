package arbiter

import (
	"time"

	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
)

// testHooks are points of a wait that tests synchronise on instead of
// sleeping. Each runs on the goroutine at that point and may block it.
// Only this package's tests set them (SetTestHooks in export_test.go);
// production arbiters have none, and a nil hook is skipped.
type testHooks struct {
	// Queued runs when a waiting Acquire has joined key's queue: this
	// arbiter's queue (memory fairness), or its queue key is in etcd
	// (durable fairness). Its place in the order is fixed from here on.
	Queued func(key string, session int64)
	// Watching runs when the head of key's queue starts watching for the
	// release from rev, after a refused attempt of its own.
	Watching func(key string, session int64, rev int64)
	// Claimed runs when a release has claimed key's head waiter for a
	// handoff, before its Txn.
	Claimed func(key string, session int64)
	// WaitEnded runs when a memory waiter's wait has ended without a
	// grant (deadline, cancel, drain), before it withdraws from the queue.
	WaitEnded func(key string, session int64)
	// AnyTokenRead runs when a release by any_token has read the
	// session record, before its Txn.
	AnyTokenRead func(key string, session int64)
	// Answered runs when Acquire has decided its answer, after any
	// release of a grant its caller could no longer hear of.
	Answered func(key string, session int64, err error)
	// ShardLeaseGranted runs when a Router has granted session a lease on
	// shard, before it records the lease on the coord cluster.
	ShardLeaseGranted func(session int64, shard string)
	// ActionLoaded, ActionClaimed, ActionTxn and SessionRevoking are the
	// Admin API's, documented on admin.Hooks: the two-person actions'
	// points (adminHooks hands them over).
	ActionLoaded    func(id string)
	ActionClaimed   func(id string) (crash bool)
	ActionTxn       func(id string) (run bool, err error)
	SessionRevoking func(session int64) error
	// ClaimBound and ShardAddWait shorten the Admin API's bounds (see
	// admin.Hooks), so tests need not wait them out.
	ClaimBound, ShardAddWait *time.Duration
}

func (a *Arbiter) queuedHook(key string, session int64) {
	if h := a.hooks.Load(); h != nil && h.Queued != nil {
		h.Queued(key, session)
	}
}

func (a *Arbiter) watchingHook(key string, session, rev int64) {
	if h := a.hooks.Load(); h != nil && h.Watching != nil {
		h.Watching(key, session, rev)
	}
}

func (a *Arbiter) waitEndedHook(key string, session int64) {
	if h := a.hooks.Load(); h != nil && h.WaitEnded != nil {
		h.WaitEnded(key, session)
	}
}

func (a *Arbiter) answeredHook(key string, session int64, err error) {
	if h := a.hooks.Load(); h != nil && h.Answered != nil {
		h.Answered(key, session, err)
	}
}

func (a *Arbiter) claimedHook(key string, session int64) {
	if h := a.hooks.Load(); h != nil && h.Claimed != nil {
		h.Claimed(key, session)
	}
}

func (a *Arbiter) anyTokenReadHook(key string, session int64) {
	if h := a.hooks.Load(); h != nil && h.AnyTokenRead != nil {
		h.AnyTokenRead(key, session)
	}
}

// adminHooks are the Admin API's hooks of those set; nil when none are.
func (a *Arbiter) adminHooks() *admin.Hooks {
	h := a.hooks.Load()
	if h == nil {
		return nil
	}
	return &admin.Hooks{ActionLoaded: h.ActionLoaded, ActionClaimed: h.ActionClaimed, ActionTxn: h.ActionTxn, SessionRevoking: h.SessionRevoking,
		ClaimBound: h.ClaimBound, ShardAddWait: h.ShardAddWait}
}

func (ro *Router) shardLeaseGrantedHook(session int64, shard string) {
	if h := ro.hooks.Load(); h != nil && h.ShardLeaseGranted != nil {
		h.ShardLeaseGranted(session, shard)
	}
}
