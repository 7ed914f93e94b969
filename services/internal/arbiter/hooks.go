package arbiter

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
	// ActionLoaded runs when an approval or a denial has read a pending
	// request, before its claim (decide).
	ActionLoaded func(id string)
	// ActionClaimed runs when an approval has claimed a request
	// (executing), before it carries it out; true stops the approval
	// there, as a crash of the arbiter would.
	ActionClaimed func(id string) (crash bool)
	// ActionTxn runs before an approval's Txn (force record, epoch
	// advance). A non-nil error replaces its answer: with run, after the
	// Txn, as a deadline passing after the commit would; without, in its
	// place, as a Txn that never reached etcd.
	ActionTxn func(id string) (run bool, err error)
	// SessionRevoking runs before a force-release revokes the holder's
	// session lease; a non-nil error stands for the revoke failing.
	SessionRevoking func(session int64) error
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

func (a *Arbiter) actionLoadedHook(id string) {
	if h := a.hooks.Load(); h != nil && h.ActionLoaded != nil {
		h.ActionLoaded(id)
	}
}

func (a *Arbiter) actionClaimedHook(id string) bool {
	if h := a.hooks.Load(); h != nil && h.ActionClaimed != nil {
		return h.ActionClaimed(id)
	}
	return false
}

func (a *Arbiter) actionTxnHook(id string) (run bool, err error) {
	if h := a.hooks.Load(); h != nil && h.ActionTxn != nil {
		return h.ActionTxn(id)
	}
	return true, nil
}

func (a *Arbiter) sessionRevokingHook(session int64) error {
	if h := a.hooks.Load(); h != nil && h.SessionRevoking != nil {
		return h.SessionRevoking(session)
	}
	return nil
}
