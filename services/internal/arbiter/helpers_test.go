package arbiter_test

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func noFence(*lockclient.Hold) {}

func raw(c *lockclient.Client) lockv1.LockServiceClient { return lockv1.NewLockServiceClient(c.Conn()) }

func wantReason(t *testing.T, err error, want lockv1.ErrorReason) {
	t.Helper()
	if got := reason.Of(err); got != want {
		t.Fatalf("error = %v (reason %s), want reason %s", err, got, want)
	}
}
