package audit_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/audit/tailers"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/resourcetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopClickHouse()
	os.Exit(code)
}

// Every grant the clients were given is in ClickHouse once, and every
// expiry, across a holder that crashes, a tailer killed and restarted and
// the etcd leader killed: the tailer reads the log, so it misses nothing
// the log has.
func TestEveryGrantAndExpiryReachesClickHouse(t *testing.T) {
	ch := resourcetest.StartClickHouse(t)
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 3*time.Minute)
	store := chstore.New(ch.URL(), ch.Database(t), chstore.WithCredentials(ch.Writer()))
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	// As the arbiters run them: campaigning again after any failure.
	stop := tailLikeTheArbiter(t, env, store, "t1")

	var mu sync.Mutex
	observed := map[int64]string{} // grant revision -> key, as clients saw it
	traffic := func(client, rounds int) {
		s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
		for i := range rounds {
			key := fmt.Sprintf("team-a/complete/%d", i%4)
			// A leader's loss fails some calls (NO_QUORUM); the client
			// cleans up after them. Only grants a client was told of
			// are owed to the store.
			h, err := s.Lock(ctx, key, noFence)
			if err != nil {
				if ctx.Err() != nil {
					t.Errorf("client %d: %v", client, err)
					return
				}
				continue
			}
			mu.Lock()
			observed[h.Token().Revision()] = key
			mu.Unlock()
			h.Release(ctx)
		}
	}
	// A holder that crashes: it stops renewing and never releases.
	api := raw(devenvtest.Client(t, env, "demo"))
	sess, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name, Instance: "crashed"})
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/crashed/0", SessionId: sess.GetSessionId(), Class: devenvtest.Fast.Name, Instance: "crashed"})
	if err != nil {
		t.Fatal(err)
	}
	observed[crashed.GetToken().GetRevision()] = "team-a/crashed/0"

	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); traffic(c, 30) }()
	}
	// The tailer killed and restarted, then the etcd leader killed,
	// while the traffic runs.
	traffic(9, 10)
	stop()
	traffic(10, 10)
	tailLikeTheArbiter(t, env, store, "t2")
	killLeader(t, ctx, env)
	traffic(11, 10)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Wait for the expiry, which etcd commits a TTL after the crash, and
	// for every grant.
	var evs []audit.Event
	for {
		evs, err = store.ByNamespaceClass(ctx, "team-a", "", start, 10000)
		if err == nil && complete(evs, observed) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the store never had every grant and the expiry: %v; %d events", err, len(evs))
		case <-time.After(200 * time.Millisecond):
		}
	}
	grants := map[int64]int{}
	for _, e := range evs {
		if e.Kind == audit.Grant || e.Kind == audit.Handoff {
			grants[e.Revision]++
			if key, ok := observed[e.Revision]; ok && key != e.Key {
				t.Errorf("stored a grant of %s at %d, where a client was given %s", e.Key, e.Revision, key)
			}
		}
	}
	for rev, key := range observed {
		if grants[rev] != 1 {
			t.Errorf("grant of %s at revision %d stored %d times, want once", key, rev, grants[rev])
		}
	}
	t.Logf("%d grants, every one stored once; the crashed holder's expiry stored", len(observed))
}

// complete reports whether evs hold every observed grant and the crashed
// holder's expiry.
func complete(evs []audit.Event, observed map[int64]string) bool {
	seen := map[int64]bool{}
	expired := false
	for _, e := range evs {
		seen[e.Revision] = seen[e.Revision] || e.Kind == audit.Grant || e.Kind == audit.Handoff
		expired = expired || (e.Kind == audit.Expiry && e.Key == "team-a/crashed/0" && e.Instance == "crashed")
	}
	for rev := range observed {
		if !seen[rev] {
			return false
		}
	}
	return expired
}

// killLeader stops the embedded cluster's leader and starts it again.
func killLeader(t *testing.T, ctx context.Context, env *devenv.Env) {
	t.Helper()
	for i, ep := range env.Cluster.Endpoints() {
		st, err := env.Etcd.Status(ctx, ep)
		if err != nil || st.Leader != st.Header.MemberId {
			continue
		}
		env.Cluster.StopMember(i)
		if err := env.Cluster.StartMember(ctx, i, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no leader found")
}

// tailLikeTheArbiter runs the tailers as an arbiter does (tailers.Run:
// campaigning again after a failure) until the returned stop.
func tailLikeTheArbiter(t *testing.T, env *devenv.Env, store audit.Store, name string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tailers.Run(ctx, tailers.Config{CoordName: "coord", Coord: env.Etcd, Store: store, Name: name, Backoff: 50 * time.Millisecond})
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
