package arbiter

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultGroupCommit is Config.GroupCommit's default, chosen by
// benchmarks/core (docs/performance.md).
const DefaultGroupCommit = 1

// maxBatch is the most requests one group commit carries.
const maxBatch = 64

// maxTxnOps is etcd's default --max-txn-ops. etcd allows a Txn that many
// compares or operations per branch, and a nested Txn only what its
// parents leave: a batch of n requests leaves each sub-Txn maxTxnOps-n.
const maxTxnOps = 128

// groupCommit sends the lock path's grant and release Txns of one cluster.
// While inflight Txns are in flight (and none has stalled), new requests
// wait, and the next Txn carries every waiting request, each as a sub-Txn
// with its own compares, writes and reads: one Raft proposal grants many
// keys. Each sub-Txn
// commits or not exactly as it would alone. All of them commit at one
// revision, so tokens of different keys may be equal; two requests for
// one key never share a Txn, so each key's tokens still strictly increase.
type groupCommit struct {
	etcd     Etcd
	inflight int
	// dropCompare is the broken variant the gate must catch (brokenBatch).
	dropCompare bool
	// reads makes each batch one flat read-only Txn (newGroupRead).
	reads bool

	// runners run the batches: a Txn call grows a stack that a goroutine
	// per batch would grow again every time.
	runners *workers

	mu      sync.Mutex
	queue   []*subTxn
	running int
	// stalled counts the Txns in flight past stallAfter: each lets one
	// more run beside the inflight (up to maxStalled).
	stalled int
	// took is a moving average of how long a Txn takes; a Txn is stalled
	// only well past it (stallAfter).
	took time.Duration
}

// subTxn is one request's Txn and, once done is closed, its outcome.
type subTxn struct {
	key      string
	cmps     []clientv3.Cmp
	then     []clientv3.Op
	els      []clientv3.Op
	deadline time.Time
	width    int // txnWidth of its compares and branches

	done chan struct{}
	resp *clientv3.TxnResponse
	err  error
}

// newGroupCommit commits on etcd with at most inflight Txns at once; 0 or
// less sends every request as its own Txn.
func newGroupCommit(etcd Etcd, inflight int) *groupCommit {
	return &groupCommit{etcd: etcd, inflight: inflight, dropCompare: brokenBatch, runners: newWorkers(workerIdle)}
}

// newGroupRead coalesces linearizable reads of one cluster: reads asked
// while a Txn of reads is in flight go together in the next one, a
// read-only Txn that etcd serves with one ReadIndex rather than one per
// read. A read is never answered by a Txn sent before it was asked, so it
// sees every write committed before then, as a Get of its own would.
func newGroupRead(etcd Etcd) *groupCommit {
	// Several in flight: one read stuck on a member must not hold up
	// every renewal behind it.
	return &groupCommit{etcd: etcd, inflight: groupReadsInFlight, reads: true, runners: newWorkers(workerIdle)}
}

// groupReadsInFlight is how many group reads of a cluster may be in flight.
const groupReadsInFlight = 4

// get is a linearizable Get of op's range, possibly sent with others (a
// group of newGroupRead only). ctx must carry a deadline.
func (g *groupCommit) get(ctx context.Context, key string, op clientv3.Op) (*clientv3.GetResponse, error) {
	if !g.reads || !op.IsGet() {
		return nil, errors.New("group read: a write, or a group that commits")
	}
	resp, err := g.commit(ctx, key, nil, []clientv3.Op{op}, nil)
	if err != nil {
		return nil, err
	}
	r := resp.Responses[0].GetResponseRange()
	if r == nil {
		return nil, errors.New("group read: an answer that is not a range")
	}
	// The whole Txn's header, as a Get's: a range inside a Txn carries
	// only the revision, no cluster ID, member or term.
	r.Header = resp.Header
	return (*clientv3.GetResponse)(r), nil
}

// commit is Txn(ctx).If(cmps).Then(then).Else(els).Commit() for the lock
// key key, possibly sent with others. Its response's header is the shared
// Txn's. ctx must carry a deadline (opCtx): the shared Txn runs to the
// latest deadline among its requests (send).
func (g *groupCommit) commit(ctx context.Context, key string, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if g.inflight <= 0 {
		return g.etcd.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil, errors.New("group commit: a request without a deadline")
	}
	s := &subTxn{key: key, cmps: cmps, then: then, els: els, deadline: deadline, width: txnWidth(cmps, then, els), done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, s)
	start := g.running < g.limit()
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		g.runners.run(g.run)
	}
	select {
	case <-s.done:
		return s.resp, s.err
	case <-ctx.Done():
		// Still queued or in flight: the outcome is unknown to the caller,
		// as for a Txn of its own whose deadline passed.
		return nil, ctx.Err()
	}
}

// run sends batches until none is waiting, or until it is one more than
// the limit (a stalled Txn it ran beside has come back).
func (g *groupCommit) run() {
	for {
		g.mu.Lock()
		if g.running > g.limit() {
			g.running--
			g.mu.Unlock()
			return
		}
		batch := g.take(time.Now())
		if len(batch) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		after := max(stallAfter, stallTimes*g.took)
		g.mu.Unlock()
		g.sendWatched(batch, after)
	}
}

// sendWatched sends batch and counts it stalled while it is in flight
// past after.
func (g *groupCommit) sendWatched(batch []*subTxn, after time.Duration) {
	var stalled, done bool // under g.mu
	start := time.Now()
	timer := time.AfterFunc(after, func() {
		g.mu.Lock()
		if done { // fired as the Txn came back
			g.mu.Unlock()
			return
		}
		stalled = true
		g.stalled++
		more := len(g.queue) > 0 && g.running < g.limit()
		if more {
			g.running++
		}
		g.mu.Unlock()
		if more {
			g.runners.run(g.run)
		}
	})
	g.send(batch)
	timer.Stop()
	took := time.Since(start)
	g.mu.Lock()
	done = true
	if stalled {
		g.stalled--
	}
	g.took += (took - g.took) / 8
	g.mu.Unlock()
}

// limit is how many Txns may be in flight: inflight, plus one beside each
// stalled one (at most maxStalled). Called with g.mu held.
func (g *groupCommit) limit() int { return g.inflight + min(g.stalled, maxStalled) }

// A Txn is stalled once in flight for stallAfter, or stallTimes the
// average Txn when that is longer: one Txn stuck on a slow or cut-off
// member must not hold every grant of the cluster for its whole
// deadline, yet an etcd slow for every Txn must not turn the batches
// into many small ones, which would slow it further.
const (
	stallAfter = 100 * time.Millisecond
	stallTimes = 4
)

// maxStalled bounds the Txns that stalls add to a group's inflight.
const maxStalled = 4

// take removes the next batch from the queue, oldest first: at most
// maxBatch requests, no two for one key, no more than etcd's maxTxnOps
// allows. A request whose deadline has passed is answered and not sent.
// Called with g.mu held.
func (g *groupCommit) take(now time.Time) []*subTxn {
	var batch []*subTxn
	keys := map[string]bool{}
	widest := 0
	rest := g.queue[:0]
	for _, s := range g.queue {
		// A request alone is sent as a Txn of its own, not nested.
		fits := len(batch) == 0 || len(batch)+1+max(widest, s.width) <= maxTxnOps
		switch {
		case !now.Before(s.deadline):
			s.finish(nil, context.DeadlineExceeded)
		case len(batch) < maxBatch && !keys[s.key] && fits:
			keys[s.key] = true
			widest = max(widest, s.width)
			batch = append(batch, s)
		default:
			rest = append(rest, s)
		}
	}
	clear(g.queue[len(rest):])
	g.queue = rest
	return batch
}

// send commits batch in one Txn and answers each request. The Txn runs to
// the latest of the requests' deadlines, so that one request about to time
// out does not end the others' Txn: its caller stops waiting at its own
// deadline (commit), with the outcome unknown, as for a Txn of its own.
func (g *groupCommit) send(batch []*subTxn) {
	deadline := batch[0].deadline
	for _, s := range batch[1:] {
		if s.deadline.After(deadline) {
			deadline = s.deadline
		}
	}
	ctx, cancel := context.WithDeadline(clientv3.WithRequireLeader(context.Background()), deadline)
	defer cancel()
	if len(batch) == 1 {
		s := batch[0]
		s.finish(g.etcd.Txn(ctx).If(s.cmps...).Then(s.then...).Else(s.els...).Commit())
		return
	}
	ops := make([]clientv3.Op, len(batch))
	for i, s := range batch {
		if g.reads {
			// Flat: a Txn of ranges only is read-only to etcd (one
			// ReadIndex, no Raft entry); a nested one would be proposed.
			ops[i] = s.then[0]
			continue
		}
		cmps := s.cmps
		if g.dropCompare && i >= 1 && len(cmps) > 0 {
			cmps = cmps[1:]
		}
		ops[i] = clientv3.OpTxn(cmps, s.then, s.els)
	}
	resp, err := g.etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil && refusedWhole(err) {
		// etcd refused the Txn before applying any of it (one request's
		// write named a lease gone, say): send each alone, so that each
		// gets its own answer rather than another's refusal.
		var wg sync.WaitGroup
		for _, s := range batch {
			wg.Go(func() { s.finish(g.etcd.Txn(ctx).If(s.cmps...).Then(s.then...).Else(s.els...).Commit()) })
		}
		wg.Wait()
		return
	}
	for i, s := range batch {
		if err != nil {
			s.finish(nil, err)
			continue
		}
		if g.reads {
			s.finish(&clientv3.TxnResponse{Header: resp.Header, Succeeded: true, Responses: resp.Responses[i : i+1]}, nil)
			continue
		}
		sub := resp.Responses[i].GetResponseTxn()
		s.finish(&clientv3.TxnResponse{Header: resp.Header, Succeeded: sub.GetSucceeded(), Responses: sub.GetResponses()}, nil)
	}
}

// txnWidth is what a Txn takes of etcd's maxTxnOps: its widest list of
// compares, Then or Else operations, plus the widest Txn nested in them.
func txnWidth(cmps []clientv3.Cmp, then, els []clientv3.Op) int {
	nested := 0
	for _, op := range append(slices.Clip(then), els...) {
		if op.IsTxn() {
			nested = max(nested, txnWidth(op.Txn()))
		}
	}
	return max(len(cmps), len(then), len(els)) + nested
}

func (s *subTxn) finish(resp *clientv3.TxnResponse, err error) {
	s.resp, s.err = resp, err
	close(s.done)
}

// refusedWhole reports whether etcd refused a Txn as a request, before
// applying any of it: only errors etcd returns from its checks of the
// whole request (before proposal, or at apply before the first write).
// Anything else, a status a gRPC client or transport made or etcd's
// NOSPACE (returned after the Txn was applied), may follow a Txn that
// committed, so its outcome stays unknown.
func refusedWhole(err error) bool {
	switch rpctypes.Error(err) {
	case rpctypes.ErrLeaseNotFound, rpctypes.ErrKeyNotFound, rpctypes.ErrDuplicateKey, rpctypes.ErrTooManyOps,
		rpctypes.ErrEmptyKey, rpctypes.ErrRequestTooLarge, rpctypes.ErrTooManyRequests,
		rpctypes.ErrPermissionDenied, rpctypes.ErrAuthOldRevision:
		return true
	}
	return false
}
