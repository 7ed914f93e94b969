package arbiter

import (
	"context"
	"sync"
)

// queues orders this arbiter's waiters for each key by arrival (ADR-14,
// memory fairness): only the head of a key's queue watches for the release
// and makes the next grant attempt, so one release makes one attempt, not
// a herd; and a release on this arbiter hands the key to the head in the
// release's own Txn (handoff.go). The order is best effort: it holds among
// the waiters of one arbiter (Envoy routes a key to one arbiter), and a Txn
// still decides every grant (ADR-15).
type queues struct {
	mu   sync.Mutex
	keys map[string][]*waiter
}

// waiterState is where a waiter is in its wait; guarded by queues.mu.
type waiterState int

const (
	// queued: behind the head; neither watches nor attempts.
	queued waiterState = iota
	// watching: the head, between attempts; a releaser may claim it.
	watching
	// attempting: the head, with its own grant Txn in flight.
	attempting
	// claimed: a releaser is handing it the key; only the releaser's
	// outcome may end its wait.
	claimed
)

// waiter is one waiting Acquire, with what a releaser needs to grant it.
type waiter struct {
	req     request
	session int64
	// want is the session record its grant Txn compares.
	want string

	// turn is closed when the waiter becomes the head of its queue.
	turn chan struct{}
	// from is the revision the head watches for a release from; 0 means
	// attempt at once, the key's state being unknown.
	from  int64
	state waiterState
	// outcome receives the one answer of the releaser that claimed it.
	outcome chan handoffOutcome
}

// handoffOutcome is a releaser's answer to the waiter it claimed: granted,
// or not (the waiter then attempts at once; a handoff whose Txn outcome is
// unknown is found by that attempt, which sees its own hold).
type handoffOutcome struct {
	granted bool
	grant   grant
}

// join queues w for key; w's refused attempt was at revision rev.
func (q *queues) join(key string, w *waiter, rev int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.keys == nil {
		q.keys = map[string][]*waiter{}
	}
	w.turn, w.from, w.outcome = make(chan struct{}), rev, make(chan handoffOutcome, 1)
	q.keys[key] = append(q.keys[key], w)
	if len(q.keys[key]) == 1 {
		w.state = watching
		close(w.turn)
	}
}

// leave removes w. If w was the head, the next waiter becomes head and
// watches from handoff: the revision of w's grant (the key is held from
// there on), or 0 when w gave up without a grant (attempt at once). A
// claimed waiter cannot leave: it returns false and must await its
// outcome.
func (q *queues) leave(key string, w *waiter, handoff int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state == claimed {
		return false
	}
	ws := q.keys[key]
	for i, o := range ws {
		if o != w {
			continue
		}
		ws = append(ws[:i], ws[i+1:]...)
		if i == 0 && len(ws) > 0 {
			ws[0].from, ws[0].state = handoff, watching
			close(ws[0].turn)
		}
		break
	}
	if len(ws) == 0 {
		delete(q.keys, key)
	} else {
		q.keys[key] = ws
	}
	return true
}

// await blocks until w is the head, returning the revision to watch from.
func (q *queues) await(ctx context.Context, w *waiter) (int64, error) {
	select {
	case <-w.turn:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return w.from, nil
}

// begin moves the head from watching to attempting. It returns false when
// a releaser claimed it first: its outcome is coming.
func (q *queues) begin(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state == claimed {
		return false
	}
	w.state = attempting
	return true
}

// watch moves the head back to watching after a refused attempt.
func (q *queues) watch(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.state = watching
}

// claim returns key's head if it is watching, claimed for a handoff: from
// here until settle it neither attempts nor gives up.
func (q *queues) claim(key string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.keys[key]
	if len(ws) == 0 || ws[0].state != watching {
		return nil
	}
	ws[0].state = claimed
	return ws[0]
}

// settle gives a claimed waiter its outcome and makes it the head again,
// attempting on its own.
func (q *queues) settle(w *waiter, o handoffOutcome) {
	q.mu.Lock()
	w.state = attempting
	q.mu.Unlock()
	w.outcome <- o
}

// depth is the number of waiters queued for key.
func (q *queues) depth(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys[key])
}
