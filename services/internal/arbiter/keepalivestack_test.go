package arbiter_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// A session's KeepAlive stream lives as long as the session, so what its
// goroutine keeps between renewals is paid per session: renewing must not
// leave that goroutine with the stack the etcd calls grew (16 KB, where a
// stream waiting for its first renewal needs 8).
func TestAnIdleKeepAliveStreamKeepsASmallStack(t *testing.T) {
	// A class of its own with a long TTL: nothing renews the raw sessions
	// until all 200 are open, which takes seconds on a loaded machine.
	idle := class.Class{Name: "idle", TTL: 5 * time.Minute, Tier: class.TierCoord}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, idle)})
	ctx := ctxT(t, 60*time.Second)
	api := raw(devenvtest.Client(t, env, "demo"))
	const streams = 200
	stacks := func() int64 {
		// Stacks shrink at GC, by half each time one uses under a quarter.
		for range 4 {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.StackInuse)
	}
	sessions := make([]int64, streams)
	for i := range sessions {
		s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: idle.Name})
		if err != nil {
			t.Fatal(err)
		}
		sessions[i] = s.GetSessionId()
	}
	// The control: the same streams before any renewal, so the client's
	// side of each (in this process too) and gRPC's are counted in both.
	before := stacks()
	kas := make([]lockv1.LockService_KeepAliveClient, streams)
	for i := range kas {
		var err error
		if kas[i], err = api.KeepAlive(ctx); err != nil {
			t.Fatal(err)
		}
		defer kas[i].CloseSend()
	}
	// A stream's handler starts when its headers arrive, on a goroutine
	// of its own: count them in before measuring.
	buf := make([]byte, 16<<20)
	for handlers(buf) < streams {
		runtime.Gosched()
	}
	opened := stacks()
	for i, ka := range kas {
		for range 2 {
			if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: sessions[i]}); err != nil {
				t.Fatal(err)
			}
			if r, err := ka.Recv(); err != nil || r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
				t.Fatalf("renewal: %v, %v", r, err)
			}
		}
	}
	renewed := stacks()
	perOpen, perRenewed := (opened-before)/streams, (renewed-opened)/streams
	t.Logf("%d KeepAlive streams: %d B of stack each when opened, %+d B each once renewed", streams, perOpen, perRenewed)
	// Stacks come in powers of two: a renewal's stack kept by its stream
	// adds 8 KB to each.
	if perRenewed > 4<<10 {
		t.Fatalf("each idle stream keeps %d B more stack once it has renewed: a renewal's stack stays with its stream", perRenewed)
	}
}

// handlers counts the goroutines serving a KeepAlive stream, reading
// every goroutine's stack into buf.
func handlers(buf []byte) int {
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "arbiter.serveKeepAlive(")
}
