package lockclient

import (
	"context"
	"math/rand/v2"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/internal/testhook"
	"github.com/lockplane/lockplane/services/client/reason"
)

// After an Acquire or Release whose outcome is unknown, the session may
// hold the key without knowing the token: a grant (or handoff) may have
// committed though its answer never came, or a release may not have. Like
// etcd's concurrency.Mutex, which deletes its key when a Lock fails, the
// session then ends whatever hold it has on the key, by
// Release{key, session, any_token, class}, before the key can be locked
// again on this session. A definite refusal (CONTENDED, PERMISSION_DENIED,
// INVALID_*, QUOTA_EXCEEDED, WRONG_REGION, SEALED, MOVING, ...) granted
// nothing and needs no cleanup.
//
// Ending a hold without its token is safe here because the session
// serialises Lock and Release per key (lock.go): while the cleanup runs
// the key's state stays in the lease's holds, so no other Hold of this
// session on this key can exist, in any class, and the re-entrancy count is the client's (ADR-13).

const (
	// cleanupTimeout bounds one try: the arbiter reads the session and
	// runs one Txn, each within its own bound (2 s by default).
	cleanupTimeout = 5 * time.Second
	// cleanupBackoff doubles between tries, up to cleanupMaxBackoff.
	cleanupBackoff    = 200 * time.Millisecond
	cleanupMaxBackoff = 5 * time.Second
)

// outcomeUnknown reports whether a failed Acquire or Release may still
// have taken effect: the service said so (NO_QUORUM, STORE_ERROR), or no
// Lockplane answer came (a deadline, a cancellation, a transport error).
func outcomeUnknown(err error) bool {
	switch reason.Of(err) {
	case lockv1.ErrorReason_NO_QUORUM, lockv1.ErrorReason_STORE_ERROR:
		return true
	case lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return err != nil
	}
	return false
}

// cleanupDone reports whether a cleanup's answer settles the key: it was
// released, there was nothing of the session's to release, or the session
// is over (its lease ends every hold on it), or the caller may no longer
// touch the key at all. Anything else, an unknown outcome or a refusal
// that passes (an arbiter without the key's shard, a moving range, a
// drain, etcd refusing the arbiter's credentials or out of space), is
// tried again.
func cleanupDone(err error) bool {
	if err == nil {
		return true
	}
	switch reason.Of(err) {
	case lockv1.ErrorReason_SESSION_EXPIRED, lockv1.ErrorReason_SESSION_NOT_OWNED, lockv1.ErrorReason_PERMISSION_DENIED,
		lockv1.ErrorReason_INVALID_KEY, lockv1.ErrorReason_INVALID_ARGUMENT, lockv1.ErrorReason_UNKNOWN_CLASS,
		lockv1.ErrorReason_WRONG_REGION:
		return true
	}
	return false
}

// cleanUp ends hs after an unknown outcome, in the background, trying
// until the answer settles the key or the lease is over. Meanwhile the
// key's state stays in l.holds, so a Lock of it waits (within its own
// deadline) rather than being answered with a grant it might share.
func (l *lease) cleanUp(hs *holdState) {
	backoff := cleanupBackoff
	for l.life.Err() == nil && !cleanupDone(l.cleanUpOnce(l.life, hs)) {
		testhook.CleanupRetry(hs.key)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2))
		select {
		case <-l.life.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, cleanupMaxBackoff)
	}
	l.forget(hs)
}

// cleanUpOnce asks the service, once and within cleanupTimeout, to end
// whatever hold the lease has on hs's key.
func (l *lease) cleanUpOnce(ctx context.Context, hs *holdState) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	_, err := l.api.Release(routedBy(ctx, hs.key), &lockv1.ReleaseRequest{Key: hs.key, SessionId: l.id, AnyToken: true, Class: hs.class})
	return err
}
