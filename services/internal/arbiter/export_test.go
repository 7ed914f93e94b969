package arbiter

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Internals the external tests use and measure.

// EncodeHold is a hold record exactly as a grant writes it, for tests that
// forge one straight into etcd as a rogue writer with etcd credentials
// would.
func EncodeHold(identity string, session int64, class string, since time.Time) string {
	return holdRecord{Identity: identity, Session: session, Class: class, Since: since}.Encode()
}

// ValidateLimiters is the number of namespaces with a ValidateToken
// limiter of their own.
func ValidateLimiters(a *Arbiter) int {
	a.validations.mu.Lock()
	defer a.validations.mu.Unlock()
	return len(a.validations.by)
}

// MaxNamespaceLabels and MaxLimiters are the caps the tests check.
const (
	MaxNamespaceLabels = maxNamespaceLabels
	MaxLimiters        = maxLimiters
)

// TestHooks lets this package's external tests set the arbiter's test
// hooks (hooks.go).
type TestHooks = testHooks

// SetTestHooks installs h on a; nil removes them.
func (a *Arbiter) SetTestHooks(h *TestHooks) { a.hooks.Store(h) }

// SetTestHooks installs h on every cluster's arbiter of ro; nil removes
// them.
func (ro *Router) SetTestHooks(h *TestHooks) {
	for _, c := range ro.all() {
		c.(*Arbiter).SetTestHooks(h)
	}
}

// ActionKey is the coord cluster's etcd key of a two-person request.
func ActionKey(id string) string { return actionKey(id) }

// ForceKey is the force record's etcd key of action id.
func ForceKey(id string) string { return forceKey(id) }

// BreakForceCompare swaps in a broken force-release Txn that deletes the
// holds without comparing them to the request's revision and value, until
// restore: the safety tests show their checks catch it.
func BreakForceCompare() (restore func()) {
	orig := forceTxn
	forceTxn = func(a *Arbiter, rec actionRecord, holds []holdFact, fr forceRecord, lease clientv3.LeaseID) ([]clientv3.Cmp, []clientv3.Op) {
		_, ops := orig(a, rec, holds, fr, lease)
		return nil, ops
	}
	return func() { forceTxn = orig }
}

// BreakTwoPersonRule lets anyone approve, the requester too, until restore.
func BreakTwoPersonRule() (restore func()) {
	orig := twoPersonRule
	twoPersonRule = func(Operator, Operator) bool { return true }
	return func() { twoPersonRule = orig }
}

// BreakClaimCompare swaps in a broken claim that puts a request's next
// state without comparing its revision, until restore: the concurrency
// tests show they catch two decisions both winning.
func BreakClaimCompare() (restore func()) {
	orig := claimCompare
	claimCompare = func(string, int64) []clientv3.Cmp { return nil }
	return func() { claimCompare = orig }
}

// SetClaimBound sets how old an executing request's claim must be before
// reconcile, finding nothing done, puts it back to pending, until restore.
func SetClaimBound(d time.Duration) (restore func()) {
	orig := claimBound
	claimBound = func(*adminServer) time.Duration { return d }
	return func() { claimBound = orig }
}

// MaxRevokedHolds is the most holds one revoke_session force-release ends.
const MaxRevokedHolds = maxRevokedHolds
