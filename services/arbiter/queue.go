package arbiter

import (
	"context"
	"sync"
)

// queues orders this arbiter's waiters for each key by arrival (ADR-14,
// memory fairness): only the head of a key's queue watches for the release
// and makes the next grant attempt, so one release makes one attempt, not
// a herd. The order is best effort: it holds among the waiters of one
// arbiter (Envoy routes a key to one arbiter), and a Txn still decides
// every grant (ADR-15).
type queues struct {
	mu   sync.Mutex
	keys map[string][]*waiter
}

// waiter is one waiting Acquire.
type waiter struct {
	// turn is closed when the waiter becomes the head of its queue.
	turn chan struct{}
	// from is the revision the head watches for a release from; 0 means
	// attempt at once, the key's state being unknown.
	from int64
}

// join queues a waiter for key whose refused attempt was at revision rev.
func (q *queues) join(key string, rev int64) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.keys == nil {
		q.keys = map[string][]*waiter{}
	}
	w := &waiter{turn: make(chan struct{}), from: rev}
	q.keys[key] = append(q.keys[key], w)
	if len(q.keys[key]) == 1 {
		close(w.turn)
	}
	return w
}

// leave removes w. If w was the head, the next waiter becomes head and
// watches from handoff: the revision of w's grant (the key is held from
// there on), or 0 when w gave up without a grant (attempt at once).
func (q *queues) leave(key string, w *waiter, handoff int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.keys[key]
	for i, o := range ws {
		if o != w {
			continue
		}
		ws = append(ws[:i], ws[i+1:]...)
		if i == 0 && len(ws) > 0 {
			ws[0].from = handoff
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

// depth is the number of waiters queued for key.
func (q *queues) depth(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys[key])
}
