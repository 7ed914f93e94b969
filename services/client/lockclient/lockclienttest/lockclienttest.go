// Package lockclienttest lets tests of code built on lockclient wait for
// the client's internal events instead of sleeping. Not for production use.
package lockclienttest

import "github.com/lockplane/lockplane/services/client/internal/testhook"

// Hooks are the client's test hooks: AwaitingKey runs when a Lock waits for
// its key's failed or ending grant to go; CleanupRetry when a cleanup after
// an unknown outcome did not settle its key and will try again; Fenced when
// a session's lease has fenced and its holds' OnFence callbacks have
// returned; AwaitingOpen when a Session waits for another Session's open
// of its class.
type Hooks = testhook.Hooks

// SetHooks installs h process-wide; nil removes them.
func SetHooks(h *Hooks) { testhook.Set(h) }
