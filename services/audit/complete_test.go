package audit_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chstore"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/tailers"
	"github.com/lockplane/lockplane/services/resourcetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopClickHouse()
	os.Exit(code)
}

// Every grant the clients were given is in ClickHouse once, and every
// expiry, across holders that crash, a tailer stopped and restarted, a
// tailer crashed (no final checkpoint: its successor replays all it
// stored) and the etcd leader killed: the tailer reads the log, so it
// misses nothing the log has, and the store's FINAL view shows a replayed
// event once.
func TestEveryGrantAndExpiryReachesClickHouse(t *testing.T) {
	ch := resourcetest.StartClickHouse(t)
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 3*time.Minute)
	store := &countingStore{Store: chstore.New(ch.URL(), ch.Database(t), chstore.WithCredentials(ch.Writer())), n: map[string]int{}, changed: make(chan struct{})}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	// As the arbiters run them: campaigning again after any failure.
	stop := tailLikeTheArbiter(t, env, store, "t0")

	var mu sync.Mutex
	// The grants clients were given. With group commit several keys are
	// granted at one revision, so a grant is its key and revision.
	observed := map[grantAt]bool{}
	traffic := func(client, rounds int) (last int64) {
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
			observed[grantAt{key, h.Token().Revision()}] = true
			mu.Unlock()
			last = h.Token().Revision()
			h.Release(ctx)
		}
		return last
	}
	// Holders that crash: they stop renewing and never release.
	crashed := map[string]bool{}
	crash := func(key string) {
		api := raw(devenvtest.Client(t, env, "demo"))
		sess, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name, Instance: "crashed"})
		if err != nil {
			t.Fatal(err)
		}
		h, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: sess.GetSessionId(), Class: devenvtest.Fast.Name, Instance: "crashed"})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		observed[grantAt{key, h.GetToken().GetRevision()}] = true
		crashed[key] = true
		mu.Unlock()
	}
	crash("team-a/crashed/0")

	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); traffic(c, 30) }()
	}
	// While the traffic runs: the tailer stopped (it checkpoints) and
	// another started that never checkpoints and crashes, a holder
	// crashed just before (its lease ends while no tailer runs), then a
	// third tailer, and the etcd leader killed.
	traffic(9, 10)
	stop()
	ck := checkpointOf(t, ctx, env.Etcd)
	crashTailer := crashingTailer(t, env, store, "t1")
	last := traffic(10, 10)
	crash("team-a/crashed/1")
	// The crashing tailer has stored past the checkpoint: its successor
	// must read it all again.
	if err := store.await(ctx, func() bool { return store.last >= last }); err != nil {
		t.Fatal(err)
	}
	crashTailer()
	if now := checkpointOf(t, ctx, env.Etcd); now != ck {
		t.Fatalf("the crashed tailer moved the checkpoint from %d to %d", ck, now)
	}
	traffic(11, 10)
	tailLikeTheArbiter(t, env, store, "t2")
	killLeader(t, ctx, env)
	traffic(12, 10)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Wait for the expiries, which etcd commits a TTL after each crash,
	// and for every grant.
	var evs []audit.Event
	var err error
	for {
		evs, err = store.ByNamespaceClass(ctx, "team-a", "", start, 10000)
		if err == nil && len(missing(evs, observed, crashed)) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the store never had every grant and expiry: %v; missing %v", err, missing(evs, observed, crashed))
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, p := range problems(evs, observed) {
		t.Error(p)
	}
	if store.replayed() == 0 {
		t.Fatal("no event was inserted twice: the crash replayed nothing, so the FINAL view was not tested")
	}
	t.Logf("%d grants and %d expiries stored once each; %d events were inserted more than once (replays after the crash)",
		len(observed), len(crashed), store.replayed())

	// The checks themselves, on broken copies of the history: an event
	// lost, one shown twice, an expiry missing.
	t.Run("checks fail on a broken history", func(t *testing.T) {
		var grant, expiry int
		for i, e := range evs {
			switch e.Kind {
			case audit.Grant:
				grant = i
			case audit.Expiry:
				expiry = i
			}
		}
		lost := slices.Delete(slices.Clone(evs), grant, grant+1)
		if len(missing(lost, observed, crashed)) == 0 {
			t.Error("a lost grant went unnoticed")
		}
		if len(problems(append(slices.Clone(evs), evs[grant]), observed)) == 0 {
			t.Error("a grant shown twice went unnoticed")
		}
		if len(missing(slices.Delete(slices.Clone(evs), expiry, expiry+1), observed, crashed)) == 0 {
			t.Error("a missing expiry went unnoticed")
		}
	})
}

// grantAt is one grant: its key and the revision of its Txn.
type grantAt struct {
	key string
	rev int64
}

func (g grantAt) String() string { return fmt.Sprintf("grant of %s at %d", g.key, g.rev) }

// missing lists the observed grants and the crashed holders' expiries
// that evs lack.
func missing(evs []audit.Event, observed map[grantAt]bool, crashed map[string]bool) []string {
	seen := map[grantAt]bool{}
	expired := map[string]bool{}
	for _, e := range evs {
		if e.Kind == audit.Grant || e.Kind == audit.Handoff {
			seen[grantAt{e.Key, e.Revision}] = true
		}
		if e.Kind == audit.Expiry && e.Instance == "crashed" {
			expired[e.Key] = true
		}
	}
	var out []string
	for g := range observed {
		if !seen[g] {
			out = append(out, g.String())
		}
	}
	for key := range crashed {
		if !expired[key] {
			out = append(out, "expiry of "+key)
		}
	}
	return out
}

// problems lists the events shown more than once, and the observed grants
// stored other than once.
func problems(evs []audit.Event, observed map[grantAt]bool) []string {
	var out []string
	rows := map[string]int{}
	grants := map[grantAt]int{}
	for _, e := range evs {
		id := fmt.Sprintf("%s/%d/%s", e.ClusterID, e.Revision, e.Key)
		if rows[id]++; rows[id] == 2 {
			out = append(out, "event shown more than once: "+id)
		}
		if e.Kind == audit.Grant || e.Kind == audit.Handoff {
			grants[grantAt{e.Key, e.Revision}]++
		}
	}
	for g := range observed {
		if grants[g] != 1 {
			out = append(out, fmt.Sprintf("%s stored %d times, want once", g, grants[g]))
		}
	}
	return out
}

// countingStore counts how often each event was inserted, and the
// highest revision inserted.
type countingStore struct {
	*chstore.Store
	mu      sync.Mutex
	n       map[string]int
	last    int64
	changed chan struct{}
}

func (s *countingStore) Insert(ctx context.Context, evs []audit.Event) error {
	// Held across the insert: whoever sees the rows in ClickHouse finds
	// them counted.
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Insert(ctx, evs); err != nil {
		return err
	}
	for _, e := range evs {
		s.n[fmt.Sprintf("%s/%d/%s", e.ClusterID, e.Revision, e.Key)]++
		s.last = max(s.last, e.Revision)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// await returns once ok holds (called with s.mu held), or ctx's error.
func (s *countingStore) await(ctx context.Context, ok func() bool) error {
	for {
		s.mu.Lock()
		done, ch := ok(), s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// replayed is how many events were inserted more than once.
func (s *countingStore) replayed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.n {
		if c > 1 {
			n++
		}
	}
	return n
}

// crashingTailer runs the tailers as an arbiter does, on a client of its
// own and never checkpointing, until crash: the client is closed first,
// so the tailer cannot write its final checkpoint nor end its election
// (its successor waits out the election's lease), as when its process
// dies.
func crashingTailer(t *testing.T, env *devenv.Env, store audit.Store, name string) (crash func()) {
	cli, err := etcdauth.New(env.Cluster.ClientConfig(etcdauth.Tailer))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tailers.Run(ctx, tailers.Config{CoordName: "coord", Coord: cli, Store: store, Name: name,
			Backoff: 50 * time.Millisecond, CheckpointEvery: time.Hour})
	}()
	var once sync.Once
	crash = func() { once.Do(func() { cli.Close(); cancel(); <-done }) }
	t.Cleanup(crash)
	return crash
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
