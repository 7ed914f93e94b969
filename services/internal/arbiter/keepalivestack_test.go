package arbiter_test

import (
	"runtime"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// A session's KeepAlive stream lives as long as the session, so what its
// goroutine keeps between renewals is paid per session: renewing must not
// leave that goroutine with the stack the etcd calls grew (16 KB, where
// an idle stream needs 8).
func TestAnIdleKeepAliveStreamKeepsASmallStack(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	api := raw(devenvtest.Client(t, env, "demo"))
	const streams = 200
	var before, after runtime.MemStats
	settle := func(ms *runtime.MemStats) {
		// Stacks shrink at GC, by half each time one uses under a quarter.
		for range 4 {
			runtime.GC()
		}
		runtime.ReadMemStats(ms)
	}
	settle(&before)
	goroutines := runtime.NumGoroutine()
	kas := make([]lockv1.LockService_KeepAliveClient, streams)
	for i := range kas {
		s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name})
		if err != nil {
			t.Fatal(err)
		}
		if kas[i], err = api.KeepAlive(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := kas[i].Send(&lockv1.KeepAliveRequest{SessionId: s.GetSessionId()}); err != nil {
				t.Fatal(err)
			}
			if r, err := kas[i].Recv(); err != nil || r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
				t.Fatalf("renewal: %v, %v", r, err)
			}
		}
	}
	settle(&after)
	perStream := (int64(after.StackInuse) - int64(before.StackInuse)) / streams
	t.Logf("%d idle KeepAlive streams: %+d goroutines, %d B of stack per stream (client's and server's)",
		streams, runtime.NumGoroutine()-goroutines, perStream)
	// The client's side of each stream is in this process too: a goroutine
	// watching its context, a few KB. Stacks come in powers of two: the
	// server's idle stream keeps 8 KB, or 16 with a renewal's stack.
	if perStream > 16<<10 {
		t.Fatalf("%d B of stack per idle stream: a renewal's stack stays with its stream", perStream)
	}
	for _, ka := range kas {
		ka.CloseSend()
	}
}
