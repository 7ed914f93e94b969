// Package testhook holds the points the client library's tests synchronise
// on instead of sleeping. Only lockclienttest sets them.
package testhook

import "sync/atomic"

// Hooks are called, when set, at the points their names say.
type Hooks struct {
	// AwaitingKey runs when a Lock finds its key's grant on the session
	// failed or ending (a Release or a cleanup in flight) and waits for
	// it to go.
	AwaitingKey func(key string)
	// CleanupRetry runs when a cleanup's try did not settle the key and
	// another will follow.
	CleanupRetry func(key string)
	// Fenced runs when a lease has fenced and its holds' OnFence
	// callbacks have returned.
	Fenced func(session int64)
	// AwaitingOpen runs when a Session waits for another Session's open
	// of its class.
	AwaitingOpen func(class string)
}

var current atomic.Pointer[Hooks]

// Set installs h; nil removes them.
func Set(h *Hooks) { current.Store(h) }

// AwaitingKey calls the AwaitingKey hook, if any.
func AwaitingKey(key string) {
	if h := current.Load(); h != nil && h.AwaitingKey != nil {
		h.AwaitingKey(key)
	}
}

// CleanupRetry calls the CleanupRetry hook, if any.
func CleanupRetry(key string) {
	if h := current.Load(); h != nil && h.CleanupRetry != nil {
		h.CleanupRetry(key)
	}
}

// Fenced calls the Fenced hook, if any.
func Fenced(session int64) {
	if h := current.Load(); h != nil && h.Fenced != nil {
		h.Fenced(session)
	}
}

// AwaitingOpen calls the AwaitingOpen hook, if any.
func AwaitingOpen(class string) {
	if h := current.Load(); h != nil && h.AwaitingOpen != nil {
		h.AwaitingOpen(class)
	}
}
