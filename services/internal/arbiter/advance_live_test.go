package arbiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// quietTTL is every class's TTL in the advance tests: the quiet period an
// operator's advance keeps is the longest TTL plus a second, so short.
const quietTTL = 2 * time.Second

// advanceCase is a live, unsealed cluster advanced under a holder: the
// coord cluster, or an entity shard behind a Router.
type advanceCase struct {
	name    string
	cluster string // "" for the coord cluster
	class   string
	env     func(*testing.T) *devenv.Env
	etcd    func(*devenv.Env) *clientv3.Client
}

func shortClasses(extra ...class.Class) class.Registry {
	// The default class too: the registry's longest TTL sets the quiet.
	return class.NewStatic(append([]class.Class{{Name: class.DefaultName, TTL: quietTTL, Tier: class.TierCoord}}, extra...)...)
}

var advanceCases = []advanceCase{
	{name: "coord", env: func(t *testing.T) *devenv.Env {
		return devenvtest.Start(t, devenv.Options{Classes: shortClasses()})
	}, etcd: func(e *devenv.Env) *clientv3.Client { return e.Etcd }},
	{name: "shard", cluster: "a", class: "entity-short", env: func(t *testing.T) *devenv.Env {
		return devenvtest.Start(t, devenv.Options{Shards: []string{"a"},
			Classes: shortClasses(class.Class{Name: "entity-short", TTL: quietTTL, Tier: class.TierEntity, Prefixes: []string{"team-a/"}})})
	}, etcd: func(e *devenv.Env) *clientv3.Client { return e.ShardEtcd["a"] }},
}

// An operator's advance of a live cluster (the Admin API's, as `lockctl
// epoch advance` sends it) ends every session on it: the holder's next
// renewal on its KeepAlive stream answers SESSION_EXPIRED, its client
// fences the hold (CanStart false), its session grants nothing more, and
// no other session is granted the key until the holder's last confirmed
// renewal has run out (the quiet period); then the key is granted again,
// in the new epoch.
func TestAnAdvanceOfALiveClusterEndsItsSessions(t *testing.T) {
	for _, tc := range advanceCases {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			ctx := ctxT(t, 2*time.Minute)
			const key = "team-a/advanced/1"
			holder := devenvtest.Client(t, env, "demo")
			s := devenvtest.Session(t, holder, tc.class)
			h, err := s.TryLock(ctx, key, noFence)
			if err != nil {
				t.Fatal(err)
			}
			// The holder's renewals on a stream of their own: the first
			// finds the caller owns the session, which the stream remembers.
			renew := renewStream(t, ctx, holder, s.ID())
			if r := renew(); r.GetTtl() == nil {
				t.Fatalf("renewal before the advance: %s %s", r.GetError(), r.GetErrorMessage())
			}

			admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
			st, err := admin.Status(ctx, &adminv1.StatusRequest{Cluster: tc.cluster})
			if err != nil {
				t.Fatal(err)
			}
			adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: tc.cluster, ExpectedEpoch: st.GetEpoch(), Reason: "test: a live advance"})
			if err != nil {
				t.Fatal(err)
			}
			if adv.GetDeletedHolds() != 1 {
				t.Fatalf("advance: %v, want the one hold deleted", adv)
			}

			// The same stream's next renewal hears of it.
			if r := renew(); r.GetError() != lockv1.ErrorReason_SESSION_EXPIRED {
				t.Fatalf("the holder's renewal after the advance answered %s (ttl %v, %q): it still believes it holds %s, which the advance deleted",
					r.GetError(), r.GetTtl().AsDuration(), r.GetErrorMessage(), key)
			}
			// Another session is refused the key while the holder's last
			// confirmed renewal may still be running.
			other := devenvtest.Client(t, env, "demo")
			s2 := devenvtest.Session(t, other, tc.class)
			_, err = raw(other).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s2.ID(), Instance: s2.Instance(), Class: tc.class})
			if err == nil {
				t.Fatalf("%s granted to another session right after the advance, while its old holder may still believe it holds it", key)
			}
			wantReason(t, err, lockv1.ErrorReason_EPOCH_CHANGED)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "resume") {
				t.Fatalf("the quiet refusal is %v: want UNAVAILABLE saying when grants resume", err)
			}
			// So does the client library's own renewal: the hold is fenced.
			select {
			case <-h.Fenced():
			case <-time.After(3 * quietTTL):
				t.Fatalf("the holder's client never fenced %s after the advance (CanStart %v)", key, h.CanStart())
			}
			if h.CanStart() {
				t.Fatal("CanStart is true after the hold was fenced")
			}
			_, meta := reason.Info(err)
			wait, perr := time.ParseDuration(meta["retry_after"])
			if perr != nil || wait <= 0 || wait > quietTTL+2*time.Second {
				t.Fatalf("retry_after %q: want a duration up to the longest TTL plus a second", meta["retry_after"])
			}
			// The event is the quiet period's end, a time: wait for it.
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
			got, err := raw(other).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s2.ID(), Instance: s2.Instance(), Class: tc.class})
			if err != nil {
				t.Fatalf("after the quiet period: %v", err)
			}
			if tok := token.Token(got.GetToken().GetValue()); tok.Epoch() != adv.GetEpoch() || tok <= h.Token() {
				t.Fatalf("granted epoch %d revision %d after advancing to epoch %d (the old hold's token %v)", tok.Epoch(), tok.Revision(), adv.GetEpoch(), h.Token())
			}
			// The old session grants nothing more: its record is gone.
			_, err = raw(holder).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/advanced/2", SessionId: s.ID(), Instance: s.Instance(), Class: tc.class})
			wantReason(t, err, lockv1.ErrorReason_SESSION_EXPIRED)
			// Every session record on the advanced cluster went (the coord
			// session's, or its lease's on the shard).
			resp, err := tc.etcd(env).Get(ctx, lockkey.SessionPrefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				if kv.CreateRevision < adv.GetRevision() {
					t.Fatalf("session record %s, created before the advance, survived it", kv.Key)
				}
			}
		})
	}
}

// A renewal through an arbiter that has not yet heard of an advance (its
// epoch watch lags) must not keep a session whose record the advance
// deleted: the renewal reads the record after etcd confirmed it. Here the
// record goes without any epoch change, as a lagging watch would see it.
// Before, the renewal answered a TTL from the stream's cached owner check.
func TestARenewalOfASessionWhoseRecordIsGoneFails(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: shortClasses()})
	ctx := ctxT(t, time.Minute)
	holder := devenvtest.Client(t, env, "demo")
	s, err := raw(holder).OpenSession(ctx, &lockv1.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	renew := renewStream(t, ctx, holder, s.GetSessionId())
	if r := renew(); r.GetTtl() == nil {
		t.Fatalf("first renewal: %s %s", r.GetError(), r.GetErrorMessage())
	}
	if _, err := env.Etcd.Delete(ctx, lockkey.SessionKey(s.GetSessionId())); err != nil {
		t.Fatal(err)
	}
	if r := renew(); r.GetError() != lockv1.ErrorReason_SESSION_EXPIRED {
		t.Fatalf("a renewal after the session's record went answered %s (ttl %v): its holder would go on believing", r.GetError(), r.GetTtl().AsDuration())
	}
}

// renewStream renews session once per call, on one KeepAlive stream of c's.
func renewStream(t *testing.T, ctx context.Context, c *lockclient.Client, session int64) func() *lockv1.KeepAliveResponse {
	ka, err := raw(c).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return func() *lockv1.KeepAliveResponse {
		t.Helper()
		if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: session}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}
