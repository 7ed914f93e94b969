package arbiter_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recordedEtcd is the Admin API's client with its KV requests recorded.
type recordedEtcd struct {
	arbiter.Etcd
	rec *etcdauth.Recorder
}

func (r recordedEtcd) Get(ctx context.Context, k string, o ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return r.rec.Get(ctx, k, o...)
}
func (r recordedEtcd) Put(ctx context.Context, k, v string, o ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return r.rec.Put(ctx, k, v, o...)
}
func (r recordedEtcd) Delete(ctx context.Context, k string, o ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return r.rec.Delete(ctx, k, o...)
}
func (r recordedEtcd) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	return r.rec.Do(ctx, op)
}
func (r recordedEtcd) Txn(ctx context.Context) clientv3.Txn { return r.rec.Txn(ctx) }

// adminWritesOutside is what the Admin API wrote outside its rule: etcd
// has no delete-only permission, so the admin role may put under /l/ and
// only the code keeps it to deletes there (and under /q/, the record of
// the session a --revoke-session ends, session, and the whole of /s/,
// which an epoch advance deletes to end every session); every put is
// under /sys/.
func adminWritesOutside(spec etcdauth.Spec, session string, uses []etcdauth.Use) []string {
	var out []string
	for _, u := range uses {
		if !spec.Allows(etcdauth.Admin, u) {
			out = append(out, fmt.Sprintf("%s %q..%q outside the admin role", u.Op, u.Key, u.End))
		}
		switch u.Op {
		case "delete":
			inLocks := strings.HasPrefix(u.Key, lockkey.HoldPrefix) || strings.HasPrefix(u.Key, lockkey.WaitPrefix)
			revoked := u.Key == session && u.End == ""
			everySession := u.Key == lockkey.SessionPrefix && u.End == clientv3.GetPrefixRangeEnd(lockkey.SessionPrefix)
			if !inLocks && !revoked && !everySession {
				out = append(out, fmt.Sprintf("delete %q..%q outside /l/, /q/, the revoked session's record and the whole of /s/", u.Key, u.End))
			}
		case "put":
			if !strings.HasPrefix(u.Key, "/sys/") {
				out = append(out, fmt.Sprintf("put %q outside /sys/", u.Key))
			}
		}
	}
	return out
}

// Every write of the Admin API's force-release (one hold, and a whole
// session) and two-person epoch advance, run through the arbiter as the
// admin etcd user, is inside the admin role, deletes only holds, waiters,
// a revoked session's record and every session record (the advance's),
// and puts only under /sys/.
func TestTheAdminAPIOnlyDeletesUnderTheLockKeySpace(t *testing.T) {
	var rec *etcdauth.Recorder
	env := forceEnv(t, devenv.Options{WrapAdminEtcd: func(e arbiter.Etcd) arbiter.Etcd {
		rec = etcdauth.NewRecorder(e)
		return recordedEtcd{e, rec}
	}})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	for _, k := range []string{"jobs/r-1", "jobs/r-2", "jobs/r-3"} {
		if _, err := s.TryLock(ctx, k, func(*lockclient.Hold) {}); err != nil {
			t.Fatal(err)
		}
	}
	admin := adminOf(t, env)
	for _, revoke := range []bool{false, true} {
		act := request(t, ctx, admin, "tok-alice", map[bool]string{false: "jobs/r-1", true: "jobs/r-2"}[revoke], revoke)
		r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
		if err != nil {
			t.Fatalf("approve (revoke session %v): %v", revoke, err)
		}
		if r.GetForceRelease().GetSessionRevoked() != revoke {
			t.Fatalf("approve (revoke session %v): session revoked %v", revoke, r.GetForceRelease().GetSessionRevoked())
		}
	}
	_, req := requestAdvance(t, ctx, admin)
	if _, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: req.GetAction().GetId()}); err != nil {
		t.Fatal(err)
	}

	writes, deletes, everySession := map[string]bool{}, 0, false
	for _, u := range rec.Uses() {
		if u.Writes() {
			writes[u.Op+" "+u.Key] = true
		}
		if u.Op == "delete" {
			deletes++
			everySession = everySession || u.Key == lockkey.SessionPrefix
		}
	}
	if deletes == 0 {
		t.Fatal("the recorder saw no delete: it recorded nothing of the admin paths")
	}
	if !everySession {
		t.Fatal("the epoch advance deleted no session record: sessions opened before it would outlive it")
	}
	if bad := adminWritesOutside(env.EtcdAuth, lockkey.SessionKey(s.ID()), rec.Uses()); len(bad) > 0 {
		t.Fatalf("the Admin API wrote outside its rule:\n%s", strings.Join(bad, "\n"))
	}
	t.Logf("the admin paths' writes: %v", slices.Sorted(maps.Keys(writes)))
}

// The rule above catches a path that puts into the lock key space (which
// etcd's admin role allows) or deletes elsewhere.
func TestTheAdminWriteRuleCatchesAPutUnderL(t *testing.T) {
	spec := etcdauth.Generated()
	for _, u := range []etcdauth.Use{
		{Op: "put", Key: lockkey.HoldKey("jobs/x")},
		{Op: "delete", Key: "/sys/epoch"},
		{Op: "delete", Key: lockkey.SessionKey(8)},
		{Op: "delete", Key: lockkey.SessionPrefix, End: "\x00"},
		{Op: "delete", Key: "/s", End: clientv3.GetPrefixRangeEnd("/s")},
	} {
		if len(adminWritesOutside(spec, lockkey.SessionKey(7), []etcdauth.Use{u})) == 0 {
			t.Fatalf("%+v passed the admin write rule", u)
		}
	}
	allowed := []etcdauth.Use{{Op: "delete", Key: lockkey.HoldKey("jobs/x")}, {Op: "delete", Key: lockkey.SessionKey(7)},
		{Op: "delete", Key: lockkey.SessionPrefix, End: clientv3.GetPrefixRangeEnd(lockkey.SessionPrefix)}}
	if bad := adminWritesOutside(spec, lockkey.SessionKey(7), allowed); len(bad) > 0 {
		t.Fatalf("a hold's, the revoked session's or the advance's delete was refused: %v", bad)
	}
}
