package etcdauth

import "sync/atomic"

// CountSignIns counts the sign-ins of clients made by New until the test
// ends (restore).
func CountSignIns() (n *atomic.Int64, restore func()) {
	n = &atomic.Int64{}
	signInHook = func() { n.Add(1) }
	return n, func() { signInHook = nil }
}
