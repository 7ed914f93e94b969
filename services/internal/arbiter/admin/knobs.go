package admin

import "time"

// Timing knobs: the safety tests of the Admin API (services/internal/
// arbiter's, via its export_test.go) shorten a bound with these rather
// than wait it out; nothing else may call them. Each returns the
// function that restores the real bound. The switches that break a rule
// are in broken.go, built only for tests.

// SetClaimBound sets how old an executing request's claim must be before
// reconcile, finding nothing done, puts it back to pending.
func SetClaimBound(d time.Duration) (restore func()) {
	orig := claimBound
	claimBound = func(*Server, string) time.Duration { return d }
	return func() { claimBound = orig }
}

// SetShardAddWait sets how long an approved shard add waits for the
// moving ranges' holders (and runs its steps) before it stops, leaving
// the request pending to be approved again.
func SetShardAddWait(d time.Duration) (restore func()) {
	orig := shardAddWait
	shardAddWait = func(*Server) time.Duration { return d }
	return func() { shardAddWait = orig }
}
