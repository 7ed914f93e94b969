package arbiter

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// One KeepAlive stream renewing 10,000 distinct sessions of its caller
// remembers at most maxOwned of them: a stream cannot grow the arbiter's
// memory without bound. Forgotten ones still renew, at one more read.
func TestAKeepAliveStreamRemembersBoundedSessions(t *testing.T) {
	const sessions = 10_000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli := oneMember(t, ctx)
	a := readyArbiter(t, ctx, cli)
	caller := spiffeid.RequireFromString("spiffe://t/many")
	rec := sessionFor(caller, class.Default.TTL, "").Encode()
	ids := make([]int64, sessions)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < sessions; i += 16 {
				lease, err := cli.Grant(ctx, 300)
				if err == nil {
					_, err = cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)), rec, clientv3.WithLease(lease.ID))
				}
				if err != nil {
					errs <- err
					return
				}
				ids[i] = int64(lease.ID)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	owned := newOwned() // one stream's
	peak := 0
	for _, id := range ids {
		if r := a.renew(ctx, caller, id, owned); r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Fatalf("renew %d: %s %s", id, r.GetError(), r.GetErrorMessage())
		}
		peak = max(peak, owned.len())
	}
	// The first session was forgotten long ago: it renews all the same.
	if r := a.renew(ctx, caller, ids[0], owned); r.GetTtl() == nil {
		t.Fatalf("a forgotten session's renewal: %s %s", r.GetError(), r.GetErrorMessage())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d sessions renewed on one stream: %d remembered at most (cap %d); heap %+d KiB", sessions, peak, maxOwned, grew/1024)
	if peak > maxOwned {
		t.Fatalf("the stream remembered %d sessions, over its cap %d", peak, maxOwned)
	}
	runtime.KeepAlive(owned)
	// Generous: remembering every session would be well under this too;
	// the count above is the real check.
	if grew > 8<<20 {
		t.Fatalf("the heap grew %d KiB over %d renewals", grew/1024, sessions)
	}
}
