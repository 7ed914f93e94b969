// Package election runs singleton jobs under an election on etcd.
//
// An Election campaigns on a key prefix under a lease of its own; Lead
// holds one term, and Run campaigns again after each term ends, waiting a
// Backoff between terms, until its context ends. The audit tailers, the
// archiver and the snapshot job are its singletons.
package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrDeposed is returned when a leader lost its election (its lease ended,
// or a write under its compare found its key gone): another instance takes
// over.
var ErrDeposed = errors.New("election: no longer the elected leader (its election lease ended)")

// Election is a singleton job's election on an etcd cluster.
type Election struct {
	// Coord is a client of the cluster that holds the election: the
	// coord cluster for the audit's, the snapshotted one for its job.
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
		// Its own deadline, and past ctx's end: a stopped leader hands
		// over at once rather than after TTL.
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
