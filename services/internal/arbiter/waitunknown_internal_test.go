package arbiter

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"google.golang.org/grpc/status"
)

// A wait that ends while its last grant attempt is in flight (the arbiter
// ends a wait a little before its caller's deadline, so that the answer
// reaches it) cannot know whether that attempt will commit. If the lookup
// finds no hold of its own, the caller must hear NO_QUORUM, and so end any
// hold it may have, not CONTENDED: the attempt may commit after, and
// leave the key held by a session whose client believes it was refused.
func TestAWaitEndingOnAnAttemptOfUnknownOutcomeIsNotContended(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := oneMember(t, ctx)
	a := readyArbiter(t, ctx, cli)
	r, session := openTestSession(t, ctx, cli, "waiter", "team-a/unknown/1")
	// The wait's context has ended; the caller's has not.
	wctx, end := context.WithCancel(ctx)
	end()
	attemptErr := status.FromContextError(context.DeadlineExceeded).Err() // the attempt in flight as the wait ended
	_, err := a.lookUpUnknown(wctx, r, session, attemptErr)
	err = a.waitEnded(ctx, wctx, r, err)
	if why := reason.Of(err); why != lockv1.ErrorReason_NO_QUORUM {
		t.Fatalf("a wait ended on an attempt of unknown outcome was answered %s (%v); want NO_QUORUM", why, err)
	}
}
