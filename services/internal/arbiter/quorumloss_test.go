package arbiter_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
)

// afterGrant runs a function once, right after the arbiter's next lease
// Grant is answered: the quorum can then be taken away between an
// OpenSession's Grant and its Put, the path that must tidy up after itself.
type afterGrant struct {
	arbiter.Etcd
	then atomic.Pointer[func()]
}

func (g *afterGrant) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	resp, err := g.Etcd.Grant(ctx, ttl)
	if f := g.then.Swap(nil); f != nil {
		(*f)()
	}
	return resp, err
}

// Without a quorum every RPC answers within the README's bound: one
// OpTimeout from the call's arrival (its etcd requests share it) plus the
// round trip. The round trip is allowed 1.5 s, for this test stops etcd
// members on the same two cores it measures on; a call whose etcd
// requests each had an OpTimeout of their own would take two (4 s).
func TestEveryCallAnswersWithinTheBoundWithoutQuorum(t *testing.T) {
	const opTimeout = 2 * time.Second // the arbiter's default
	bound := opTimeout + 1500*time.Millisecond
	hook := &afterGrant{}
	env := devenvtest.Start(t, devenv.Options{OpTimeout: opTimeout,
		WrapEtcd: func(e arbiter.Etcd) arbiter.Etcd { hook.Etcd = e; return hook }})
	ctx := ctxT(t, 3*time.Minute)
	c, oc := devenvtest.Client(t, env, "demo"), devenvtest.Client(t, env, "other")
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	h, err := s.TryLock(ctx, "team-a/ql/held", noFence)
	if err != nil {
		t.Fatal(err)
	}
	waiter := devenvtest.Session(t, oc, devenvtest.Fast.Name)
	closing, err := raw(c).OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name})
	if err != nil {
		t.Fatal(err)
	}
	// A stream that has renewed s once already: its next renewal skips
	// the ownership read and goes straight to the lease.
	owned, err := raw(c).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer owned.CloseSend()
	if err := owned.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	if r, err := owned.Recv(); err != nil || r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Fatalf("renewal with quorum: %v (err %v)", r, err)
	}
	fresh, err := raw(c).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.CloseSend()

	type row struct {
		rpc, outcome string
		took         time.Duration
	}
	var rows []row
	call := func(rpc string, f func(context.Context) (string, error)) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		start := time.Now()
		ok, err := f(cctx)
		took := time.Since(start)
		outcome := ok
		if err != nil {
			outcome = fmt.Sprintf("%s/%s", status.Code(err), reason.Of(err))
		}
		rows = append(rows, row{rpc, outcome, took})
	}
	renew := func(st lockv1.LockService_KeepAliveClient) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			if err := st.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
				return "", err
			}
			r, err := st.Recv()
			if err != nil {
				return "", err
			}
			if r.GetTtl() != nil {
				return "renewed (ttl " + r.GetTtl().AsDuration().String() + ")", nil
			}
			return "refused " + r.GetError().String(), nil
		}
	}

	// The quorum goes between the first OpenSession's Grant and its Put.
	var stopping time.Duration
	stop := func() {
		start := time.Now()
		env.Cluster.StopMember(0)
		env.Cluster.StopMember(1)
		stopping = time.Since(start)
	}
	hook.then.Store(&stop)
	call("OpenSession (quorum lost after its Grant)", func(ctx context.Context) (string, error) {
		_, err := raw(c).OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name})
		return "opened", err
	})
	if hook.then.Load() != nil {
		t.Fatal("the arbiter made no Grant: the quorum was never taken away")
	}
	// The members stop inside the call (the hook runs in its path); on a
	// loaded machine that alone takes seconds, which are the test's own,
	// not the arbiter's.
	rows[len(rows)-1].took -= stopping
	call("OpenSession", func(ctx context.Context) (string, error) {
		_, err := raw(c).OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name})
		return "opened", err
	})
	call("KeepAlive (stream that renewed it before)", renew(owned))
	call("KeepAlive (new stream)", renew(fresh))
	call("Acquire", func(ctx context.Context) (string, error) {
		_, err := raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/ql/free", SessionId: s.ID(), Instance: s.Instance(), Class: devenvtest.Fast.Name})
		return "granted", err
	})
	call("Acquire wait=true (held key)", func(ctx context.Context) (string, error) {
		_, err := raw(oc).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/ql/held", SessionId: waiter.ID(), Instance: waiter.Instance(), Class: devenvtest.Fast.Name, Wait: true})
		return "granted", err
	})
	call("Release", func(ctx context.Context) (string, error) {
		_, err := raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: "team-a/ql/held", SessionId: s.ID(), Token: uint64(h.Token()), Class: devenvtest.Fast.Name})
		return "released", err
	})
	call("CloseSession", func(ctx context.Context) (string, error) {
		_, err := raw(c).CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: closing.GetSessionId()})
		return "closed", err
	})
	call("Inspect", func(ctx context.Context) (string, error) {
		_, err := raw(oc).Inspect(ctx, &lockv1.InspectRequest{Key: "team-a/ql/held", Class: devenvtest.Fast.Name})
		return "inspected", err
	})
	call("ValidateToken", func(ctx context.Context) (string, error) {
		_, err := raw(oc).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: "team-a/ql/held", Token: uint64(h.Token()), Class: devenvtest.Fast.Name})
		return "validated", err
	})
	call("admin Status", func(ctx context.Context) (string, error) {
		st, err := adminv1.NewAdminServiceClient(c.Conn()).Status(ctx, &adminv1.StatusRequest{})
		return fmt.Sprintf("answered (quorum %v)", st.GetQuorum()), err
	})

	var table strings.Builder
	fmt.Fprintf(&table, "\n%-44s %-34s %s\n", "RPC", "outcome", "latency")
	for _, r := range rows {
		fmt.Fprintf(&table, "%-44s %-34s %s\n", r.rpc, r.outcome, r.took.Round(time.Millisecond))
	}
	t.Logf("without quorum (OpTimeout %s, bound %s):%s", opTimeout, bound, table.String())
	for _, r := range rows {
		if r.took > bound {
			t.Errorf("%s answered after %s, over the bound %s", r.rpc, r.took.Round(time.Millisecond), bound)
		}
		// Fail closed: nothing but Status succeeds.
		if !strings.HasPrefix(r.rpc, "admin") && !strings.Contains(r.outcome, "/") && !strings.HasPrefix(r.outcome, "refused") {
			t.Errorf("%s succeeded without quorum: %s", r.rpc, r.outcome)
		}
	}
}
