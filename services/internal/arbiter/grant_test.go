package arbiter_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	"google.golang.org/grpc/status"
)

// strictlyIncreasing returns the first index whose token is not greater
// than its predecessor's, or -1.
func strictlyIncreasing(ts []token.Token) int {
	for i := 1; i < len(ts); i++ {
		if ts[i] <= ts[i-1] {
			return i
		}
	}
	return -1
}

func TestTokensStrictlyIncreaseAndDecodeToEpoch(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	st, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "demo").Conn()).Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Two sessions alternate on one key, with another key's grants in
	// between to move the revision on: order per key must still hold.
	var perKey []token.Token
	for i := 0; i < 20; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		h, err := s.TryLock(ctx, "team-a/orders/1", noFence)
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		o, err := s.TryLock(ctx, fmt.Sprintf("team-a/other/%d", i), noFence)
		if err != nil {
			t.Fatal(err)
		}
		perKey = append(perKey, h.Token())
		if h.Token().Epoch() != st.GetEpoch() {
			t.Fatalf("token decodes to epoch %d, current epoch is %d", h.Token().Epoch(), st.GetEpoch())
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := o.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if i := strictlyIncreasing(perKey); i >= 0 {
		t.Fatalf("token %d (%v) is not greater than token %d (%v)", i, perKey[i], i-1, perKey[i-1])
	}
}

// The check above must be able to fail: a per-key counter deleted with its
// hold (the design ADR-02 rejects) restarts at 1 and is caught.
func TestTokenOrderCheckCatchesRestartingCounter(t *testing.T) {
	counter := map[string]int64{}
	var ts []token.Token
	for i := 0; i < 3; i++ {
		counter["k"]++
		tok, _ := token.Mint(1, counter["k"])
		ts = append(ts, tok)
		if i == 1 {
			delete(counter, "k") // the counter key went with the hold
		}
	}
	if strictlyIncreasing(ts) < 0 {
		t.Fatal("a restarting counter passed the token order check")
	}
}

func TestRacingSessionsExactlyOneWins(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	var sessions []*lockclient.Session
	for _, id := range []string{"demo", "other", "alice", "bob"} {
		for j := 0; j < 2; j++ {
			sessions = append(sessions, devenvtest.Session(t, devenvtest.Client(t, env, id), ""))
		}
	}
	for round := 0; round < 10; round++ {
		key := fmt.Sprintf("team-a/race/%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []*lockclient.Hold
		refused := map[lockv1.ErrorReason]int{}
		start := make(chan struct{})
		for _, s := range sessions {
			wg.Add(1)
			go func(s *lockclient.Session) {
				defer wg.Done()
				<-start
				h, err := s.TryLock(ctx, key, noFence)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, h)
				} else {
					refused[reason.Of(err)]++
				}
			}(s)
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d sessions won, want exactly 1", round, len(won))
		}
		// Every loser sees CONTENDED, the winner's sibling of the same
		// identity too: replicas of one deployment contend like anyone.
		if refused[lockv1.ErrorReason_CONTENDED] != len(sessions)-1 {
			t.Fatalf("round %d: refusals %v, want %d CONTENDED", round, refused, len(sessions)-1)
		}
	}
}

// Two clients of one identity (two replicas sharing a SPIFFE ID) queue
// for a key like any two clients; only a second session of the client that
// holds the key is told LEAKED, by the client library.
func TestSameIdentityOtherClientQueuesOwnOtherSessionIsLeaked(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	c1 := devenvtest.Client(t, env, "demo")
	s1 := devenvtest.Session(t, c1, "")
	s2 := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	h, err := s1.TryLock(ctx, "team-a/leak/1", noFence)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.TryLock(ctx, "team-a/leak/1", noFence)
	wantReason(t, err, lockv1.ErrorReason_CONTENDED)
	waited := make(chan error, 1)
	queued := queuedOn(t, env)
	go func() {
		h2, err := s2.Lock(ctx, "team-a/leak/1", noFence)
		if err == nil {
			err = h2.Release(ctx)
		}
		waited <- err
	}()
	awaitQueued(t, ctx, queued, "team-a/leak/1")
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the same identity's other client, queued: %v", err)
	}
	// One client, a second session (another class's) on a key its first
	// session holds: a leak in the caller, said at once.
	if _, err := s1.TryLock(ctx, "team-a/leak/2", noFence); err != nil {
		t.Fatal(err)
	}
	fast := devenvtest.Session(t, c1, devenvtest.Fast.Name)
	_, err = fast.TryLock(ctx, "team-a/leak/2", noFence)
	wantReason(t, err, lockv1.ErrorReason_LEAKED)
}

// The service tells a leak from a replica by the instance each session was
// opened with: a key held by the same identity and instance under another
// session is LEAKED; another instance, or none, contends.
func TestTheServiceTellsALeakFromAReplicaByInstance(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	api := raw(devenvtest.Client(t, env, "demo"))
	open := func(instance string) int64 {
		t.Helper()
		r, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Instance: instance})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSessionId()
	}
	try := func(session int64, instance string) error {
		_, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/leak/raw", SessionId: session, Instance: instance})
		return err
	}
	holder := open("p1")
	if err := try(holder, "p1"); err != nil {
		t.Fatal(err)
	}
	in, err := api.Inspect(ctx, &lockv1.InspectRequest{Key: "team-a/leak/raw"})
	if err != nil || in.GetHolder().GetInstance() != "p1" {
		t.Fatalf("inspect: holder %v, %v; want instance p1", in.GetHolder(), err)
	}
	wantReason(t, try(open("p1"), "p1"), lockv1.ErrorReason_LEAKED)
	// With a queue present, a waiting Acquire of the same process is told
	// at once too, not queued behind its own hold until its wait ends.
	queued := queuedOn(t, env)
	replica := open("p2")
	waited := make(chan error, 1)
	go func() {
		_, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/leak/raw", SessionId: replica, Instance: "p2", Wait: true})
		waited <- err
	}()
	awaitQueued(t, ctx, queued, "team-a/leak/raw")
	_, err = api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/leak/raw", SessionId: open("p1"), Instance: "p1", Wait: true})
	wantReason(t, err, lockv1.ErrorReason_LEAKED)
	wantReason(t, try(open("p2"), "p2"), lockv1.ErrorReason_CONTENDED)
	wantReason(t, try(open(""), ""), lockv1.ErrorReason_CONTENDED)
	// A request naming another instance than its session's is refused,
	// naming the field.
	err = try(open("p3"), "p1")
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
	if !strings.Contains(status.Convert(err).Message(), "instance") {
		t.Fatalf("instance mismatch: %v, want the field named", err)
	}
	_, err = api.OpenSession(ctx, &lockv1.OpenSessionRequest{Instance: "a b"})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
	if _, err := api.Release(ctx, &lockv1.ReleaseRequest{Key: "team-a/leak/raw", SessionId: holder, AnyToken: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the replica's wait: %v", err)
	}
	_, err = api.OpenSession(ctx, &lockv1.OpenSessionRequest{Instance: strings.Repeat("x", 65)})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
}

func TestInvalidKeysNameTheRule(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, "")
	for key, rule := range map[string]lockkey.Rule{
		"": lockkey.RuleEmpty,
		"team-a/" + string(make([]byte, lockkey.MaxLen)): lockkey.RuleTooLong,
		"team-a/orders 42":   lockkey.RuleCharacters,
		"orders":             lockkey.RuleSegments,
		"team-a//orders":     lockkey.RuleEmptySeg,
		"team-a/../team-b/x": lockkey.RuleDotSeg,
	} {
		_, err := raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance()})
		r, meta := reason.Info(err)
		if r != lockv1.ErrorReason_INVALID_KEY || meta["rule"] != string(rule) || meta["field"] != "key" {
			t.Errorf("key %.30q: reason %s meta %v, want INVALID_KEY rule %s (err %v)", key, r, meta, rule, err)
		}
	}
}

func TestSessionOfAnotherIdentityIsRefused(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	victim := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	thief := devenvtest.Client(t, env, "other")
	_, err := raw(thief).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/x/1", SessionId: victim.ID(), Instance: victim.Instance()})
	wantReason(t, err, lockv1.ErrorReason_SESSION_NOT_OWNED)
	_, err = raw(thief).CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: victim.ID()})
	wantReason(t, err, lockv1.ErrorReason_SESSION_NOT_OWNED)
	if !victim.CanStart() {
		t.Fatal("victim's session was affected")
	}
}

func TestWaitingAcquireIsGrantedAfterRelease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	h, err := a.TryLock(ctx, "team-a/wait/1", noFence)
	if err != nil {
		t.Fatal(err)
	}
	queued, answered := hooksOn(t, env)
	got := make(chan *lockclient.Hold, 1)
	errs := make(chan error, 1)
	go func() {
		hb, err := b.Lock(ctx, "team-a/wait/1", noFence)
		if err != nil {
			errs <- err
			return
		}
		got <- hb
	}()
	// b must be waiting, not granted, while a holds: it has queued after
	// its refused attempt, and nothing may grant it before the release.
	awaitQueued(t, ctx, queued, "team-a/wait/1")
	select {
	case <-got:
		t.Fatal("waiter granted while the key was held")
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case hb := <-got:
		if hb.Token() <= h.Token() {
			t.Fatalf("waiter's token %v is not greater than the releaser's %v", hb.Token(), h.Token())
		}
	case err := <-errs:
		t.Fatal(err)
	}
	// A waiter whose deadline passes is answered CONTENDED with
	// DEADLINE_EXCEEDED (the margin that lets the answer reach it first is
	// TestAWaitEndsBeforeItsCallersDeadline's).
	short := ctxT(t, 3*time.Second)
	_, err = a.Lock(short, "team-a/wait/1", noFence)
	wantContended(t, ctx, answered, "team-a/wait/1", a.ID(), err)
}
