package etcdauth_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// signedIn is a client of New as the arbiter's user, and a count of its
// sign-ins.
func signedIn(t *testing.T, c *etcdembed.Cluster) (*clientv3.Client, *atomic.Int64) {
	t.Helper()
	n, restore := etcdauth.CountSignIns()
	t.Cleanup(restore)
	cli, err := etcdauth.New(c.ClientConfig(etcdauth.Arbiter))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, n
}

// A client of New signs in once for any number of calls and streams (a
// lease keepalive opens one each), and again after etcd refuses its token.
// clientv3's own sign-in authenticates before every stream: a password
// hash and a Raft entry per keepalive; the figures are logged side by side.
func TestASignedInClientSignsInOnceForManyKeepalives(t *testing.T) {
	c := start(t, testSpec())
	ctx := bounded(t)
	cli, n := signedIn(t, c)
	perStream := client(t, c, etcdauth.Arbiter) // clientv3's sign-in
	const calls = 20
	var took [2]time.Duration
	for i, cl := range []*clientv3.Client{cli, perStream} {
		l, err := cl.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for range calls {
			if _, err := cl.KeepAliveOnce(ctx, l.ID); err != nil {
				t.Fatalf("keepalive: %v", err)
			}
		}
		took[i] = time.Since(start)
	}
	t.Logf("%d keepalives: signed in once %v, clientv3 signing in per stream %v (%.0fx)",
		calls, took[0], took[1], float64(took[1])/float64(took[0]))
	if got := n.Load(); got != 1 {
		t.Fatalf("%d sign-ins for a grant and %d keepalives, want 1", got, calls)
	}

	// A change to the users moves etcd's auth revision: the token is
	// refused as old, and the next call signs in again and goes through.
	root := client(t, c, etcdauth.RootUser)
	if _, err := root.UserAdd(ctx, "someone", "pw-someone-else"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "/l/x"); err != nil {
		t.Fatalf("a call after the auth revision moved: %v", err)
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("%d sign-ins after a refused token, want 2", got)
	}
}

// A token past its TTL is refused by etcd; the client signs in again on
// the call that was refused (a read) and on the next stream of a lease it
// keeps alive for longer than a token lives, and the lease lives on.
func TestASignedInClientOutlivesItsTokens(t *testing.T) {
	ctx, c := shortTokens(t)
	cli, n := signedIn(t, c)
	l, err := cli.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := cli.KeepAlive(ctx, l.ID) // one stream, renewing every second
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	// Three token lifetimes, the lease renewed throughout.
	time.Sleep(6 * time.Second) // a token's expiry is wall-clock time: no event to wait on
	if _, err := cli.Get(ctx, "/l/x"); err != nil {
		t.Fatalf("a read with the token expired: %v", err)
	}
	ttl, err := cli.TimeToLive(ctx, l.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("the lease kept alive past its tokens' TTL: %v (err %v), want it alive", ttl, err)
	}
	if got := n.Load(); got < 2 {
		t.Fatalf("%d sign-ins over three token lifetimes, want a new one after the first expired", got)
	}
	t.Logf("%d sign-ins over 6 s with a 2 s token", n.Load())
}

// etcd checks a new watch against the token its gRPC stream was opened
// with, and clientv3 puts every watch with the same metadata on one
// stream, which a long-lived watch keeps open. After the token's TTL a
// watch opened on that stream is cancelled (the control below); one
// opened with WatchContext gets a stream of its own, with a fresh token,
// and its events.
func TestAWatchOpenedAfterTheTokenExpiredIsServed(t *testing.T) {
	ctx, c := shortTokens(t)
	defer etcdauth.SetRenewEvery(time.Second)()
	cli, _ := signedIn(t, c)
	lead := clientv3.WithRequireLeader(ctx)
	long := cli.Watch(lead, "/l/long") // keeps its stream open
	go func() {
		for range long {
		}
	}()
	time.Sleep(3 * time.Second) // a token's expiry is wall-clock time: no event to wait on
	first := func(w clientv3.WatchChan, key string) (clientv3.WatchResponse, bool) {
		if _, err := cli.Put(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		select {
		case wr, ok := <-w:
			return wr, ok
		case <-wctx.Done():
			t.Fatalf("no answer on the watch of %s", key)
		}
		return clientv3.WatchResponse{}, false
	}
	// The control: a watch on the long watch's stream, opened now.
	if wr, ok := first(cli.Watch(lead, "/l/control"), "/l/control"); ok && !wr.Canceled {
		t.Fatal("the control watch on the old stream was served: the check below would prove nothing")
	}
	wr, ok := first(cli.Watch(etcdauth.WatchContext(lead), "/l/fresh"), "/l/fresh")
	if !ok || wr.Canceled || len(wr.Events) != 1 {
		t.Fatalf("a watch opened with WatchContext after the token expired: canceled %v, err %v, %d events", wr.Canceled, wr.Err(), len(wr.Events))
	}
}

// shortTokens is a one-member cluster whose auth tokens live 2 s, and a
// context bounding the test.
func shortTokens(t *testing.T) (context.Context, *etcdembed.Cluster) {
	t.Helper()
	spec := testSpec()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1, Auth: &spec, AuthTokenTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return ctx, c
}
