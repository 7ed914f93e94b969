package lockclient

import (
	"context"
	"math/rand/v2"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/reason"
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
// the key's state stays in s.holds, so no other Hold of this session on
// this key can exist, and the re-entrancy count is the client's (ADR-13).

const (
	// cleanupTimeout bounds one cleanup: the arbiter reads the session and
	// runs one Txn, each within its own bound (2 s by default).
	cleanupTimeout = 5 * time.Second
	// cleanupTries and cleanupBackoff: a few tries, the backoff doubling.
	cleanupTries   = 4
	cleanupBackoff = 200 * time.Millisecond
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

// cleanUp ends hs after an unknown outcome, in the background: a few tries
// with backoff while the session lives. If none completes, the key is
// marked unclean, so that its next Lock on this session cleans up first.
func (s *Session) cleanUp(hs *holdState) {
	err := s.cleanUpRetrying(hs.key)
	s.mu.Lock()
	if err != nil && s.life.Err() == nil {
		s.unclean[hs.key] = true
	}
	s.mu.Unlock()
	s.forget(hs)
}

func (s *Session) cleanUpRetrying(key string) error {
	backoff := cleanupBackoff
	var err error
	for try := 0; try < cleanupTries; try++ {
		if try > 0 {
			t := time.NewTimer(backoff/2 + rand.N(backoff/2))
			select {
			case <-s.life.Done():
				t.Stop()
			case <-t.C:
			}
			backoff *= 2
		}
		if s.life.Err() != nil {
			return nil // the session is over: its lease ends every hold on it
		}
		if err = s.cleanUpOnce(s.life, key); err == nil {
			return nil
		}
	}
	return err
}

// cleanUpLeftover retries, before a new Acquire of key, a cleanup that
// could not complete; the key stays marked if it fails again.
func (s *Session) cleanUpLeftover(ctx context.Context, key string) error {
	s.mu.Lock()
	unclean := s.unclean[key]
	s.mu.Unlock()
	if !unclean {
		return nil
	}
	if err := s.cleanUpOnce(ctx, key); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.unclean, key)
	s.mu.Unlock()
	return nil
}

// cleanUpOnce asks the service, once and within cleanupTimeout, to end
// whatever hold the session has on key. It fails only when the outcome is
// unknown again: a definite refusal (say the caller may no longer lock the
// key) cannot be helped by retrying, and the hold, if there is one, ends
// with the session.
func (s *Session) cleanUpOnce(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	_, err := s.api.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.id, AnyToken: true, Class: s.class})
	if err != nil && outcomeUnknown(err) {
		return err
	}
	return nil
}
