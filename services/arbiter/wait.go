package arbiter

import (
	"context"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// awaitRelease returns nil when a grant attempt is worth making again: the
// hold was deleted after fromRev, the watch was lost (compaction, reconnect,
// leader loss), or the jittered poll interval passed. It never says the key
// is free; only the next grant Txn can (ADR-15). It returns ctx's error when
// the wait is over.
func (a *Arbiter) awaitRelease(ctx context.Context, holdKey string, fromRev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// From the refusing Txn's revision on: no delete between that check and
	// this watch can be missed.
	events := a.etcd.Watch(wctx, holdKey, clientv3.WithRev(fromRev+1), clientv3.WithFilterPut())
	poll := time.NewTimer(jitter(a.cfg.PollInterval))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C:
			return nil
		case wr, ok := <-events:
			if !ok || wr.Canceled || wr.Err() != nil {
				return nil
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return nil
				}
			}
		}
	}
}

// jitter spreads d over [0.5d, 1.5d) so waiters do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
