package arbiter

import (
	"context"
	"errors"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A wait ends a little before its caller's deadline (200 ms, or a tenth of
// what is left when that is less) so that the CONTENDED answer reaches
// the caller rather than its own timeout; and at the arbiter's MaxWait
// when that comes first.
func TestAWaitEndsBeforeItsCallersDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := New(Config{Etcd: nilEtcd{}, AllowAnyWorkload: true, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, left := range []time.Duration{3 * time.Second, time.Second, time.Hour} {
		d := time.Now().Add(left)
		cctx, ccancel := context.WithDeadline(ctx, d)
		wctx, wcancel := a.waitContext(cctx)
		until, _ := wctx.Deadline()
		wcancel()
		ccancel()
		margin := d.Sub(until)
		switch {
		case left == time.Hour && time.Until(until) > time.Minute:
			t.Errorf("a wait with an hour left ends in %v, after MaxWait (1m)", time.Until(until))
		case left == 3*time.Second && margin != 200*time.Millisecond:
			t.Errorf("a wait with 3s left ends %v before the deadline, want 200ms", margin)
		case left == time.Second && (margin <= 0 || margin > 100*time.Millisecond):
			t.Errorf("a wait with 1s left ends %v before the deadline, want a tenth of what is left", margin)
		}
	}
}

// A wait that ran out is CONTENDED even when its caller cancels after: a
// caller whose deadline passes while the answer is on its way cancels the
// stream, and the arbiter's answer must not depend on which came first.
// One cancelled before it ran out is Canceled.
func TestAWaitThatRanOutIsContendedWhoeverCancelsAfter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	arbiter := func(maxWait time.Duration) *Arbiter {
		a, err := New(Config{Etcd: nilEtcd{}, AllowAnyWorkload: true, MaxWait: maxWait})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	r := request{key: "team-a/wait/ran-out"}
	attempt := status.Error(codes.Aborted, "held") // the last attempt's refusal

	a := arbiter(20 * time.Millisecond)
	cctx, ccancel := context.WithCancel(ctx)
	wctx, wcancel := a.waitContext(cctx)
	<-wctx.Done() // MaxWait
	ccancel()
	if err := a.waitEnded(cctx, wctx, r, attempt); reason.Of(err) != lockv1.ErrorReason_CONTENDED || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a wait that ran out, then was cancelled: %v, want DEADLINE_EXCEEDED with CONTENDED", err)
	}
	wcancel()

	a = arbiter(time.Hour)
	cctx, ccancel = context.WithCancel(ctx)
	wctx, wcancel = a.waitContext(cctx)
	ccancel()
	if err := a.waitEnded(cctx, wctx, r, attempt); status.Code(err) != codes.Canceled || !errors.Is(wctx.Err(), context.Canceled) {
		t.Errorf("a wait cancelled before it ran out: %v, want CANCELED", err)
	}
	wcancel()
}

// endsOnSecondLook is a wait's context whose deadline passes between the
// first and the second time it is asked: its timer firing mid-answer.
type endsOnSecondLook struct {
	context.Context
	looks int
}

func (c *endsOnSecondLook) Err() error {
	if c.looks++; c.looks > 1 {
		return context.DeadlineExceeded
	}
	return nil
}

// A live wait that ends on a grant of unknown outcome (NO_QUORUM) is
// answered NO_QUORUM, so that its caller ends any hold it may have, even
// when the wait's own deadline passes as the answer is chosen. Before,
// each case read the context again, and the answer became CONTENDED.
func TestALiveNoQuorumStaysNoQuorumAsTheWaitRunsOut(t *testing.T) {
	a, err := New(Config{Etcd: nilEtcd{}, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	noQuorum := refuse.With(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM, "no etcd quorum confirmed the grant")
	wctx := &endsOnSecondLook{Context: context.Background()}
	if err := a.waitEnded(context.Background(), wctx, request{key: "team-a/wait/unknown"}, noQuorum); reason.Of(err) != lockv1.ErrorReason_NO_QUORUM {
		t.Fatalf("a live wait ended on NO_QUORUM as its deadline passed: %v, want NO_QUORUM", err)
	}
}
