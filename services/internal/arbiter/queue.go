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
	// attempting: the head, with its own grant Txn in flight or acting on
	// a releaser's answer.
	attempting
	// claimed: a releaser is handing it the key; it may neither attempt
	// nor withdraw until the releaser answers.
	claimed
	// answered: the releaser's answer is in out, not yet taken: the
	// waiter must act on it before it attempts or withdraws.
	answered
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
	// out is the answer of the releaser that claimed it, until taken.
	out handoffOutcome
	// answer is signalled when a releaser's answer is put in out; a
	// signal only says to look at the state.
	answer chan struct{}
}

// handoffOutcome is a releaser's answer to the waiter it claimed: granted,
// refused (the waiter then attempts at once), or unknown: no quorum
// confirmed the handoff Txn, which may yet have committed (an attempt
// sees its own hold; a wait that is over looks the hold up).
type handoffOutcome struct {
	granted bool
	grant   grant
	unknown bool
}

// join queues w for key; w's refused attempt was at revision rev.
func (q *queues) join(key string, w *waiter, rev int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.keys == nil {
		q.keys = map[string][]*waiter{}
	}
	w.turn, w.from, w.answer = make(chan struct{}), rev, make(chan struct{}, 1)
	q.keys[key] = append(q.keys[key], w)
	if len(q.keys[key]) == 1 {
		w.state = watching
		close(w.turn)
	}
}

// leave removes a waiter that was granted the key at revision handoff
// (its own attempt, or a releaser's answer it took): the next waiter
// becomes head and watches from there, the key being held.
func (q *queues) leave(key string, w *waiter, handoff int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.remove(key, w, handoff)
}

// withdraw takes w out of key's queue as its wait ends without a grant of
// its own: from then on no releaser can claim it. A waiter a releaser has
// claimed cannot withdraw (ok false): it must await the answer (w.answer)
// and call again. A waiter with an answer not yet taken gets it (taken
// true) instead, stays queued, and leaves once it has acted on it.
func (q *queues) withdraw(key string, w *waiter) (o handoffOutcome, taken, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch w.state {
	case claimed:
		return o, false, false
	case answered:
		o, w.out, w.state = w.out, handoffOutcome{}, attempting
		return o, true, true
	}
	q.remove(key, w, 0)
	return o, false, true
}

// remove takes w out of key's queue. If w was the head, the next waiter
// becomes head and watches from handoff (0: attempt at once).
func (q *queues) remove(key string, w *waiter, handoff int64) {
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
// a releaser claimed it first: its answer comes, or is there to take.
func (q *queues) begin(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state == claimed || w.state == answered {
		return false
	}
	w.state = attempting
	return true
}

// take returns a releaser's answer to w, if there is one, and makes w
// the head acting on its own again.
func (q *queues) take(w *waiter) (handoffOutcome, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state != answered {
		return handoffOutcome{}, false
	}
	o := w.out
	w.out, w.state = handoffOutcome{}, attempting
	return o, true
}

// watch moves the head back to watching after a refused attempt.
func (q *queues) watch(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.state = watching
}

// claim returns key's head if it is watching, claimed for a handoff: from
// here until settle it neither attempts nor withdraws.
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

// settle gives a claimed waiter the releaser's answer. The waiter stays
// answered until it takes it, so an answer is never lost to a wait that
// ends meanwhile.
func (q *queues) settle(w *waiter, o handoffOutcome) {
	q.mu.Lock()
	w.out, w.state = o, answered
	q.mu.Unlock()
	select {
	case w.answer <- struct{}{}:
	default: // a signal is pending already
	}
}

// depth is the number of waiters queued for key.
func (q *queues) depth(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys[key])
}
