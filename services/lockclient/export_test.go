package lockclient

// TestHooks lets this package's external tests set its test hooks
// (hooks.go).
type TestHooks = testHooks

// SetTestHooks installs h; nil removes them.
func SetTestHooks(h *TestHooks) { hooks.Store(h) }
