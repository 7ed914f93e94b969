package arbiter

// TestHooks lets this package's external tests set the arbiter's test
// hooks (hooks.go).
type TestHooks = testHooks

// SetTestHooks installs h on a; nil removes them.
func (a *Arbiter) SetTestHooks(h *TestHooks) { a.hooks.Store(h) }
