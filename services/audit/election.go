package audit

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Election is a singleton job's election on the coord cluster.
type Election struct {
	Coord *clientv3.Client
	// Prefix is the election's key prefix; Name this instance's value.
	Prefix, Name string
	// TTL is the election lease's; OpTimeout bounds the lease's grant and
	// revoke.
	TTL, OpTimeout time.Duration
}

// Lead campaigns and, once elected, calls f with a context that ends when
// ctx does or the election lease is lost, and with the compare that holds
// only while this instance is the leader (for writes that a deposed one
// must not make). It returns nil when ctx ended, ErrDeposed when the lease
// was lost, else f's error. A second instance waits in Campaign.
func (e Election) Lead(ctx context.Context, f func(ctx context.Context, leader clientv3.Cmp) error) error {
	// The lease is granted under a deadline: NewSession's own grant would
	// wait on a partitioned coord cluster for good.
	gctx, cancel := context.WithTimeout(ctx, e.OpTimeout)
	lease, err := e.Coord.Grant(gctx, int64(e.TTL/time.Second))
	cancel()
	if err != nil {
		return fmt.Errorf("election: lease: %w", err)
	}
	// The session's keepalive lives only as long as this call: if the
	// revoke below fails, the lease (and any candidate key a failed
	// Campaign left under it) still lapses within TTL, and the next
	// campaign does not queue behind a key nobody will ever delete.
	sctx, stopKeepAlive := context.WithCancel(ctx)
	defer stopKeepAlive()
	sess, err := concurrency.NewSession(e.Coord, concurrency.WithLease(lease.ID), concurrency.WithContext(sctx))
	if err != nil {
		return fmt.Errorf("election: session: %w", err)
	}
	defer func() {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.OpTimeout)
		defer cancel()
		sess.Client().Revoke(octx, sess.Lease())
	}()
	el := concurrency.NewElection(sess, e.Prefix)
	if err := el.Campaign(ctx, e.Name); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("election: campaign for %s: %w", e.Prefix, err)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deposed := make(chan struct{})
	go func() {
		select {
		case <-sess.Done(): // the election lease is gone
			close(deposed)
			cancel()
		case <-lctx.Done():
		}
	}()
	err = f(lctx, clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev()))
	if ctx.Err() != nil {
		return nil
	}
	select {
	case <-deposed:
		return ErrDeposed
	default:
	}
	return err
}
