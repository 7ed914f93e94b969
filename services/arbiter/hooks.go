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
