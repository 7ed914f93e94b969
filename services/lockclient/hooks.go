package lockclient

import "sync/atomic"

// testHooks are points tests synchronise on instead of sleeping; only this
// package's tests set them (SetTestHooks in export_test.go).
type testHooks struct {
	// AwaitingKey runs when a Lock finds its key's grant on the session
	// failed or ending (a Release or a cleanup in flight) and waits for
	// it to go.
	AwaitingKey func(key string)
	// CleanupRetry runs when a cleanup's try did not settle the key and
	// another will follow.
	CleanupRetry func(key string)
}

var hooks atomic.Pointer[testHooks]

func awaitingKeyHook(key string) {
	if h := hooks.Load(); h != nil && h.AwaitingKey != nil {
		h.AwaitingKey(key)
	}
}

func cleanupRetryHook(key string) {
	if h := hooks.Load(); h != nil && h.CleanupRetry != nil {
		h.CleanupRetry(key)
	}
}
