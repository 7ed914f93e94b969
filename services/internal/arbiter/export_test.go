package arbiter

import "time"

// Internals the external tests use and measure.

// EncodeHold is a hold record exactly as a grant writes it, for tests that
// forge one straight into etcd as a rogue writer with etcd credentials
// would.
func EncodeHold(identity string, session int64, class string, since time.Time) string {
	return holdRecord{Identity: identity, Session: session, Class: class, Since: since}.encode()
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
