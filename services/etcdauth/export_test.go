package etcdauth

import (
	"sync/atomic"
	"time"
)

// CountSignIns counts the sign-ins of clients made by New until the test
// ends (restore).
func CountSignIns() (n *atomic.Int64, restore func()) {
	n = &atomic.Int64{}
	signInHook = func() { n.Add(1) }
	return n, func() { signInHook = nil }
}

// SetRenewEvery sets how old a token may get before a client of New signs
// in again, until the test ends (restore).
func SetRenewEvery(d time.Duration) (restore func()) {
	old := renewEvery
	renewEvery = d
	return func() { renewEvery = old }
}
