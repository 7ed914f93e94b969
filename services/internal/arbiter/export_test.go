package arbiter

import (
	"time"

	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"github.com/lockplane/lockplane/services/metriclabels"
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
	return a.validations.Size()
}

// MaxNamespaceLabels and MaxLimiters are the caps the tests check.
const (
	MaxNamespaceLabels = metriclabels.MaxValues
	MaxLimiters        = quota.MaxLimiters
)

// TestHooks lets this package's external tests set the arbiter's test
// hooks (hooks.go).
type TestHooks = testHooks

// SetTestHooks installs h on a; nil removes them.
func (a *Arbiter) SetTestHooks(h *TestHooks) { a.hooks.Store(h) }

// SetTestHooks installs h on every cluster's arbiter of ro; nil removes
// them.
func (ro *Router) SetTestHooks(h *TestHooks) {
	ro.hooks.Store(h)
	for _, c := range ro.all() {
		c.(*Arbiter).SetTestHooks(h)
	}
}

// ActionKey is the coord cluster's etcd key of a two-person request.
func ActionKey(id string) string { return records.ActionKey(id) }

// ForceKey is the force record's etcd key of action id.
func ForceKey(id string) string { return records.ForceKey(id) }

// MaxRevokedHolds is the most holds one revoke_session force-release ends.
const MaxRevokedHolds = admin.MaxRevokedHolds
