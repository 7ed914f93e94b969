package etcdauth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/internal/tailers"
	"github.com/lockplane/lockplane/services/lockkey"
	"io"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var passwords = map[string]string{"arbiter": "arbiter-pw", "admin": "admin-pw", "tailer": "tailer-pw", "snapshot": "snapshot-pw"}

// testSpec is the default spec plus two users the tests need: "nobody",
// with no role, and "admin-narrow", the Admin API's role without
// admin-sessions.
func testSpec() etcdauth.Spec {
	s := etcdauth.DefaultSpec("root-pw", passwords)
	s.Users = append(s.Users,
		etcdauth.User{Name: "nobody", Password: "nobody-pw"},
		etcdauth.User{Name: "admin-narrow", Password: "narrow-pw", Roles: []string{etcdauth.Admin}})
	return s
}

// brokenSpec is a variant kept to show the checks catch a role that is
// too wide: the arbiter is given all of /sys/, as a hurried edit might.
func brokenSpec() etcdauth.Spec {
	s := testSpec()
	for i, r := range s.Roles {
		if r.Name == etcdauth.Arbiter {
			s.Roles[i].Perms = append([]etcdauth.Perm(nil), r.Perms...)
			s.Roles[i].Perms = append(s.Roles[i].Perms, etcdauth.Perm{Access: etcdauth.ReadWrite, Key: "/sys/", Prefix: true, Why: "broken on purpose"})
		}
	}
	return s
}

// start runs a one-member cluster with spec applied.
func start(t *testing.T, spec etcdauth.Spec) *etcdembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1, Auth: &spec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func client(t *testing.T, c *etcdembed.Cluster, user string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(c.ClientConfig(user))
	if err != nil {
		t.Fatalf("client as %q: %v", user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// bounded is a test's deadline for its etcd calls: generous, for sign-ins
// are a password hash and a Raft entry each, and CI runs these beside
// other suites on two cores.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// denied reports etcd's refusal: permission denied, or no user at all. A
// watch's cancellation carries it as a wrapped gRPC status, which only
// its text still names.
func denied(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty} {
		if errors.Is(err, e) || strings.HasSuffix(err.Error(), "desc = "+e.Error()) {
			return true
		}
	}
	return false
}

// check is one request by one user and whether etcd must allow it.
type check struct {
	user  string
	what  string
	allow bool
	run   func(ctx context.Context, cli *clientv3.Client, f fixture) error
}

// fixture is what the checks act on: leases carrying a session's keys.
type fixture struct {
	session clientv3.LeaseID // an arbiter's session lease with a hold, a waiter, a closing mark
	coord   clientv3.LeaseID // a coord session lease with its shard lease records
}

func put(key string) func(context.Context, *clientv3.Client, fixture) error {
	return func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Put(ctx, key, "x")
		return err
	}
}

func get(key string, opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, fixture) error {
	return func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Get(ctx, key, opts...)
		return err
	}
}

func del(key string, opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, fixture) error {
	return func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Delete(ctx, key, opts...)
		return err
	}
}

// watch reports etcd's answer to a watch's creation: a watch outside the
// user's read ranges is cancelled with permission denied.
func watch(key string, opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, fixture) error {
	return func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for wr := range cli.Watch(wctx, key, append(opts, clientv3.WithCreatedNotify())...) {
			if err := wr.Err(); err != nil {
				return err
			}
			if wr.Created {
				return nil
			}
		}
		return ctx.Err()
	}
}

func onLease(key string, which func(fixture) clientv3.LeaseID) func(context.Context, *clientv3.Client, fixture) error {
	return func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		_, err := cli.Put(ctx, key, "x", clientv3.WithLease(which(f)))
		return err
	}
}

func session(f fixture) clientv3.LeaseID      { return f.session }
func coordSession(f fixture) clientv3.LeaseID { return f.coord }

func revoke(which func(fixture) clientv3.LeaseID) func(context.Context, *clientv3.Client, fixture) error {
	return func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		_, err := cli.Revoke(ctx, which(f))
		return err
	}
}

// checks are every role's requests inside and outside its ranges. Each
// runs on a fresh fixture, so a revoke does not change the next check.
func checks() []check {
	hold, waiter := lockkey.HoldKey("ns/k"), lockkey.WaitKey("ns/k", 1)
	grantTxn := func(extra ...clientv3.Op) func(context.Context, *clientv3.Client, fixture) error {
		return func(ctx context.Context, cli *clientv3.Client, f fixture) error {
			// As grant.go: compare the hold's absence, the session record
			// and the epoch record; put the hold on the session's lease.
			_, err := cli.Txn(ctx).If(
				clientv3.Compare(clientv3.CreateRevision(lockkey.HoldKey("ns/new")), "=", 0),
				clientv3.Compare(clientv3.Value(lockkey.SessionKey(int64(f.session))), "=", "x"),
				clientv3.Compare(clientv3.Value(lockkey.EpochKey), "=", "x"),
			).Then(append([]clientv3.Op{clientv3.OpPut(lockkey.HoldKey("ns/new"), "h", clientv3.WithLease(f.session))}, extra...)...).
				Else(clientv3.OpGet(lockkey.HoldKey("ns/new")), clientv3.OpGet(lockkey.EpochKey)).Commit()
			return err
		}
	}
	var out []check
	add := func(user string, allow bool, what string, run func(context.Context, *clientv3.Client, fixture) error) {
		out = append(out, check{user, what, allow, run})
	}
	// The lock path.
	a := etcdauth.Arbiter
	add(a, true, "grant Txn: compares hold, session, epoch; puts the hold on the session lease", grantTxn())
	add(a, true, "put a waiter on the session lease", onLease(waiter, session))
	add(a, true, "durable wait: compare the waiters' prefix", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lockkey.WaitersOf("ns/k")), "=", 0).WithPrefix()).Commit()
		return err
	})
	add(a, true, "delete a hold (release)", del(hold))
	add(a, true, "put a session record on a new lease", onLease(lockkey.SessionKey(9), session))
	add(a, true, "put the closing mark on the lease", onLease(lockkey.ClosingKey(1), session))
	add(a, true, "put shard lease records on the coord lease", onLease(lockkey.ShardLeaseKey(1, "s1"), coordSession))
	add(a, true, "put a shard lease owner on the coord lease", onLease(lockkey.ShardLeaseOwner("s1", 1), coordSession))
	add(a, true, "keepalive the session lease", func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		_, err := cli.KeepAliveOnce(ctx, f.session)
		return err
	})
	add(a, true, "time-to-live of the session lease (Inspect)", func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		_, err := cli.TimeToLive(ctx, f.session)
		return err
	})
	add(a, true, "revoke the session lease (close)", revoke(session))
	add(a, true, "revoke the coord session lease", revoke(coordSession))
	add(a, true, "read and watch the epoch record", watch(lockkey.EpochKey))
	add(a, true, "read the shard map", get("/sys/shardmap"))
	add(a, true, "read the force records", get(etcdauth.ForcePrefix, clientv3.WithPrefix()))
	add(a, true, "count sessions (metrics)", get(lockkey.SessionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	add(a, false, "put a force record", put(etcdauth.ForcePrefix+"x"))
	add(a, false, "put the epoch record", put(lockkey.EpochKey))
	add(a, false, "delete the epoch record", del(lockkey.EpochKey))
	add(a, false, "put the shard map", put("/sys/shardmap"))
	add(a, false, "put the epoch allocation", put("/sys/epoch-alloc"))
	add(a, false, "put a cluster's highest epoch", put("/sys/epochs/c"))
	add(a, false, "put an audit checkpoint", put(audit.CheckpointPrefix+"c"))
	add(a, false, "a grant Txn that also puts a force record", grantTxn(clientv3.OpPut(etcdauth.ForcePrefix+"x", "x")))
	add(a, false, "a Txn comparing an audit key", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(audit.CheckpointPrefix+"c"), "=", 0)).Then(clientv3.OpPut(hold, "x")).Commit()
		return err
	})
	add(a, false, "read all of /sys/", get("/sys/", clientv3.WithPrefix()))
	add(a, false, "watch the whole key space", watch("/", clientv3.WithPrefix()))
	add(a, false, "put outside every prefix", put("/x"))

	// The Admin API.
	ad := etcdauth.Admin
	add(ad, true, "force-release Txn: compare the hold, delete it, put the force record", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(etcdauth.ForcePrefix+"id"), "=", 0),
			clientv3.Compare(clientv3.ModRevision(hold), ">", 0)).
			Then(clientv3.OpDelete(hold), clientv3.OpPut(etcdauth.ForcePrefix+"id", "r")).Commit()
		return err
	})
	add(ad, true, "force record on its own lease", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			return err
		}
		_, err = cli.Put(ctx, etcdauth.ForcePrefix+"id", "r", clientv3.WithLease(l.ID))
		return err
	})
	add(ad, true, "epoch advance Txn: put the record, delete every hold and waiter", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lockkey.EpochKey), "=", 0)).Then(
			clientv3.OpPut(lockkey.EpochKey, "e"), clientv3.OpDelete(lockkey.HoldPrefix, clientv3.WithPrefix()),
			clientv3.OpDelete(lockkey.WaitPrefix, clientv3.WithPrefix())).Commit()
		return err
	})
	add(ad, true, "epoch allocation Txn", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("/sys/epochs/"), "<", 1000).WithPrefix()).
			Then(clientv3.OpPut("/sys/epoch-alloc", "a"), clientv3.OpPut("/sys/epochs/c", "1")).Commit()
		return err
	})
	add(ad, true, "store the shard map", put("/sys/shardmap"))
	add(ad, true, "list a session's holds (time-to-live with its keys)", func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		_, err := cli.TimeToLive(ctx, f.coord, clientv3.WithAttachedKeys())
		return err
	})
	add(ad, true, "force-release --revoke-session: delete the session record, revoke its lease", func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		if _, err := cli.Delete(ctx, lockkey.SessionKey(int64(f.session))); err != nil {
			return err
		}
		_, err := cli.Revoke(ctx, f.coord)
		return err
	})
	// The gap: etcd has no delete-only permission, so it lets the admin
	// put a hold. TestTheAdminPathsStayInsideTheAdminRole shows the
	// admin paths never do.
	add(ad, true, "put a hold (no delete-only permission in etcd)", put(hold))
	add(ad, false, "put an audit checkpoint", put(audit.CheckpointPrefix+"c"))
	add(ad, false, "read an audit checkpoint", get(audit.CheckpointPrefix+"c"))
	add(ad, false, "put under /sys/ outside its keys", put("/sys/other"))
	add(ad, false, "put outside every prefix", put("/x"))
	add(ad, false, "watch the whole key space", watch("/", clientv3.WithPrefix()))
	add(ad, false, "delete everything", del("/", clientv3.WithPrefix()))
	// Without admin-sessions the admin role still advances an epoch, which
	// deletes every session record (the sessions opened before it end).
	add("admin-narrow", true, "force-release Txn", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).Then(clientv3.OpDelete(hold), clientv3.OpPut(etcdauth.ForcePrefix+"id", "r")).Commit()
		return err
	})
	add("admin-narrow", true, "epoch advance's deletes: every hold, waiter and session record", func(ctx context.Context, cli *clientv3.Client, _ fixture) error {
		_, err := cli.Txn(ctx).Then(clientv3.OpDelete(lockkey.HoldPrefix, clientv3.WithPrefix()),
			clientv3.OpDelete(lockkey.WaitPrefix, clientv3.WithPrefix()), clientv3.OpDelete(lockkey.SessionPrefix, clientv3.WithPrefix())).Commit()
		return err
	})
	add("admin-narrow", true, "delete a session record", del(lockkey.SessionKey(1)))
	// A lease with a closing mark or shard lease records on it is etcd's
	// to refuse to revoke without admin-sessions.
	add("admin-narrow", false, "revoke a session lease with a closing mark", revoke(session))
	add("admin-narrow", false, "revoke a coord session lease", revoke(coordSession))

	// The audit tailer.
	tl := etcdauth.Tailer
	add(tl, true, "watch the whole key space", watch("/", clientv3.WithPrefix()))
	add(tl, true, "read a force record", get(etcdauth.ForcePrefix, clientv3.WithPrefix()))
	add(tl, true, "put its checkpoint", put(audit.CheckpointPrefix+"c"))
	add(tl, true, "put the archiver's election key", put(tailers.ArchiveElection+"/1"))
	add(tl, false, "put a hold", put(hold))
	add(tl, false, "delete a hold", del(hold))
	add(tl, false, "put a force record", put(etcdauth.ForcePrefix+"x"))
	add(tl, false, "put the epoch record", put(lockkey.EpochKey))
	add(tl, false, "put next to /sys/audit/", put("/sys/auditx"))
	add(tl, false, "keep a session lease alive", func(ctx context.Context, cli *clientv3.Client, f fixture) error {
		_, err := cli.KeepAliveOnce(ctx, f.session)
		return err
	})
	add(tl, false, "revoke a session lease", revoke(session))

	// A user with no role, and no user at all.
	for _, u := range []string{"nobody", ""} {
		add(u, false, "read a hold", get(hold))
		add(u, false, "watch a hold", watch(hold))
		add(u, false, "put a hold", put(hold))
	}
	return out
}

// newFixture makes, as root, a session lease with a session record, a
// hold, a waiter and a closing mark, and a coord session lease with its
// shard lease records.
func newFixture(ctx context.Context, root *clientv3.Client) (fixture, error) {
	var f fixture
	for _, l := range []*clientv3.LeaseID{&f.session, &f.coord} {
		g, err := root.Grant(ctx, 60)
		if err != nil {
			return f, err
		}
		*l = g.ID
	}
	id := int64(f.session)
	for _, k := range []string{lockkey.SessionKey(id), lockkey.HoldKey("ns/k"), lockkey.WaitKey("ns/k", id), lockkey.ClosingKey(id)} {
		if _, err := root.Put(ctx, k, "x", clientv3.WithLease(f.session)); err != nil {
			return f, err
		}
	}
	cid := int64(f.coord)
	for _, k := range []string{lockkey.SessionKey(cid), lockkey.ShardLeaseKey(cid, "s1"), lockkey.ShardLeaseOwner("s1", id), lockkey.HoldKey("ns/c")} {
		if _, err := root.Put(ctx, k, "x", clientv3.WithLease(f.coord)); err != nil {
			return f, err
		}
	}
	return f, nil
}

// violations runs every check on c and returns those etcd answered
// otherwise than expected.
func violations(t *testing.T, c *etcdembed.Cluster) []string {
	t.Helper()
	root := client(t, c, etcdauth.RootUser)
	clients := map[string]*clientv3.Client{}
	var out []string
	for _, ch := range checks() {
		cli := clients[ch.user]
		if cli == nil {
			cli = client(t, c, ch.user)
			clients[ch.user] = cli
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f, err := newFixture(ctx, root)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		err = ch.run(ctx, cli, f)
		cancel()
		switch {
		case ch.allow && err != nil:
			out = append(out, fmt.Sprintf("%s: %s: refused, want allowed: %v", ch.user, ch.what, err))
		case !ch.allow && err == nil:
			out = append(out, fmt.Sprintf("%s: %s: allowed, want refused by etcd", ch.user, ch.what))
		case !ch.allow && !denied(err):
			out = append(out, fmt.Sprintf("%s: %s: failed, but not as refused: %v", ch.user, ch.what, err))
		}
	}
	return out
}

// Each role is refused by etcd itself outside its ranges and allowed
// inside them. LOCKPLANE_ETCDAUTH_BROKEN=1 runs it against brokenSpec,
// where it must fail (see TestABrokenSpecIsCaught).
func TestEachRoleIsRefusedOutsideItsRanges(t *testing.T) {
	spec := testSpec()
	if os.Getenv("LOCKPLANE_ETCDAUTH_BROKEN") != "" {
		spec = brokenSpec()
	}
	c := start(t, spec)
	for _, v := range violations(t, c) {
		t.Error(v)
	}
}

// The same checks catch an arbiter role that is too wide.
func TestABrokenSpecIsCaught(t *testing.T) {
	c := start(t, brokenSpec())
	v := violations(t, c)
	if len(v) == 0 {
		t.Fatal("the arbiter may write all of /sys/, and no check noticed")
	}
	joined := strings.Join(v, "\n")
	for _, want := range []string{"put a force record: allowed", "put the epoch record: allowed"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no violation %q among:\n%s", want, joined)
		}
	}
	t.Logf("the broken spec's violations, as expected:\n%s", joined)
}

// The recorder's model of etcd's range check (Spec.Allows) agrees with
// etcd on the checks' plain requests: a test that records a path and
// holds it against Spec.Allows decides as etcd would.
func TestAllowsAgreesWithEtcd(t *testing.T) {
	s := testSpec()
	cases := []struct {
		user string
		use  etcdauth.Use
		want bool
	}{
		{"arbiter", etcdauth.Use{Op: "put", Key: lockkey.HoldKey("a/b")}, true},
		{"arbiter", etcdauth.Use{Op: "put", Key: "/sys/force/x"}, false},
		{"arbiter", etcdauth.Use{Op: "range", Key: "/sys/force/", End: clientv3.GetPrefixRangeEnd("/sys/force/")}, true},
		{"arbiter", etcdauth.Use{Op: "range", Key: "/sys/", End: clientv3.GetPrefixRangeEnd("/sys/")}, false},
		{"arbiter", etcdauth.Use{Op: "put", Key: lockkey.EpochKey}, false},
		{"arbiter", etcdauth.Use{Op: "compare", Key: lockkey.EpochKey}, true},
		{"admin", etcdauth.Use{Op: "delete", Key: "/l/", End: "/l0"}, true},
		{"admin", etcdauth.Use{Op: "delete", Key: "/", End: "0"}, false},
		{"admin", etcdauth.Use{Op: "delete", Key: lockkey.SessionKey(1)}, true},
		{"admin-narrow", etcdauth.Use{Op: "delete", Key: lockkey.SessionPrefix, End: clientv3.GetPrefixRangeEnd(lockkey.SessionPrefix)}, true},
		{"admin-narrow", etcdauth.Use{Op: "delete", Key: lockkey.ClosingKey(1)}, false},
		{"admin-narrow", etcdauth.Use{Op: "range", Key: lockkey.SessionKey(1)}, true},
		{"tailer", etcdauth.Use{Op: "range", Key: "/", End: "0"}, true},
		{"tailer", etcdauth.Use{Op: "range", Key: "/", End: "\x00"}, false},
		{"tailer", etcdauth.Use{Op: "put", Key: "/sys/auditx"}, false},
		{"nobody", etcdauth.Use{Op: "range", Key: "/l/a"}, false},
	}
	for _, c := range cases {
		if got := s.Allows(c.user, c.use); got != c.want {
			t.Errorf("%s %+v: allowed %v, want %v", c.user, c.use, got, c.want)
		}
	}
}

// The key prefixes named in etcdauth are those of the packages that
// write them.
func TestPrefixesMatchTheirPackages(t *testing.T) {
	if etcdauth.ForcePrefix != audit.ForcePrefix {
		t.Errorf("ForcePrefix %q, audit's %q", etcdauth.ForcePrefix, audit.ForcePrefix)
	}
	for _, k := range []string{audit.ElectionPrefix, audit.CheckpointPrefix, tailers.ArchiveElection} {
		if !strings.HasPrefix(k, etcdauth.AuditPrefix) {
			t.Errorf("%s is not under %s", k, etcdauth.AuditPrefix)
		}
	}
	if !strings.HasPrefix(lockkey.ShardLeaseKey(7, "s"), etcdauth.ShardLeasePrefix) ||
		!strings.HasPrefix(lockkey.ShardLeaseOwner("s", 7), etcdauth.ShardLeaseOwnerPrefix) {
		t.Errorf("shard lease keys %s, %s are not under %s, %s", lockkey.ShardLeaseKey(7, "s"), lockkey.ShardLeaseOwner("s", 7),
			etcdauth.ShardLeasePrefix, etcdauth.ShardLeaseOwnerPrefix)
	}
}

// Apply is idempotent: a second call changes nothing. A changed spec is
// converged: a permission dropped is revoked, an access changed, a user's
// role dropped, a password changed (the old one no longer signs in).
func TestApplyConverges(t *testing.T) {
	spec := testSpec()
	c := start(t, spec)
	root := client(t, c, etcdauth.RootUser)
	ctx := bounded(t)
	again, err := etcdauth.Apply(ctx, root, spec, etcdauth.Options{})
	if err != nil || again.Changed() {
		t.Fatalf("a second Apply: %+v, %v", again, err)
	}
	changed := testSpec()
	for i, r := range changed.Roles {
		if r.Name == etcdauth.Tailer {
			// Drop the audit write; make the read a readwrite.
			changed.Roles[i].Perms = []etcdauth.Perm{{Access: etcdauth.ReadWrite, Key: "/", Prefix: true}}
		}
	}
	for i, u := range changed.Users {
		switch u.Name {
		case etcdauth.Admin:
			changed.Users[i].Roles = []string{etcdauth.Admin}
		case etcdauth.Arbiter:
			changed.Users[i].Password = "new-pw"
		}
	}
	got, err := etcdauth.Apply(ctx, root, changed, etcdauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := etcdauth.Applied{PermsRevoked: 1, PermsGranted: 1, RolesRevoked: 1, PasswordsSet: 1}
	if got != want {
		t.Errorf("Apply of a changed spec: %+v, want %+v", got, want)
	}
	if _, err := root.Authenticate(ctx, etcdauth.Arbiter, passwords[etcdauth.Arbiter]); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("the old arbiter password: %v, want refused", err)
	}
	if _, err := root.Authenticate(ctx, etcdauth.Arbiter, "new-pw"); err != nil {
		t.Errorf("the new arbiter password: %v", err)
	}
	if again, err := etcdauth.Apply(ctx, root, changed, etcdauth.Options{}); err != nil || again.Changed() {
		t.Fatalf("Apply of the changed spec again: %+v, %v", again, err)
	}
}

// A spec that does not hold together is refused before anything is
// applied.
func TestAnInvalidSpecIsRefused(t *testing.T) {
	s := testSpec()
	s.Users = append(s.Users, etcdauth.User{Name: "x", Password: "p", Roles: []string{"missing"}}, etcdauth.User{Name: "root", Password: "p"},
		etcdauth.User{Name: "y", Password: "p", Roles: []string{etcdauth.RootRole}})
	s.RootPassword = ""
	err := s.Validate()
	for _, want := range []string{"root password is required", `role "missing" is not defined`, `user "root"`, "user y: only the snapshot user may have etcd's root role"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
	if err := testSpec().Validate(); err != nil {
		t.Errorf("the test spec: %v", err)
	}
}

// An embedded cluster with auth takes a snapshot as root, and a rebuild
// comes back with the same users and roles, auth on.
func TestEmbeddedSnapshotAndRebuildKeepAuth(t *testing.T) {
	c := start(t, testSpec())
	ctx := bounded(t)
	if err := c.Snapshot(ctx, t.TempDir()+"/snap.db"); err != nil {
		t.Fatalf("snapshot with auth on: %v", err)
	}
	if err := c.Rebuild(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	arb := client(t, c, etcdauth.Arbiter)
	if _, err := arb.Put(ctx, lockkey.HoldKey("ns/k"), "h"); err != nil {
		t.Errorf("after the rebuild, the arbiter's put of a hold: %v", err)
	}
	if _, err := arb.Put(ctx, etcdauth.ForcePrefix+"x", "x"); !denied(err) {
		t.Errorf("after the rebuild, the arbiter's put of a force record: %v, want refused", err)
	}
	if _, err := client(t, c, "").Get(ctx, lockkey.HoldKey("ns/k")); !denied(err) {
		t.Errorf("after the rebuild, an anonymous read: %v, want refused", err)
	}
}

// The snapshot job's user takes a snapshot; no service's user can.
func TestOnlyTheSnapshotUserTakesSnapshots(t *testing.T) {
	c := start(t, testSpec())
	ctx := bounded(t)
	for _, c2 := range []struct {
		user string
		ok   bool
	}{{etcdauth.Snapshotter, true}, {etcdauth.Arbiter, false}, {etcdauth.Admin, false}, {etcdauth.Tailer, false}} {
		cli := client(t, c, c2.user)
		rc, err := cli.Snapshot(ctx)
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if c2.ok && err != nil {
			t.Errorf("a snapshot as %s: %v", c2.user, err)
		}
		if !c2.ok && !denied(err) {
			t.Errorf("a snapshot as %s: %v, want refused", c2.user, err)
		}
	}
}

// A cluster whose region stops snapshotting loses its snapshot user: a
// user of etcd's root role does not outlive the need for it. On the old
// Apply (which left unnamed users alone) the second check failed: the
// user still signed in.
func TestTheSnapshotUserIsDeletedWhenSnapshotsStop(t *testing.T) {
	c := start(t, etcdauth.DefaultSpec("root-pw", passwords))
	ctx := bounded(t)
	snap := clientv3.Config(c.ClientConfig("root"))
	snap.Username, snap.Password = etcdauth.Snapshotter, passwords[etcdauth.Snapshotter]
	signIn := func() error {
		cli, err := clientv3.New(snap)
		if err == nil {
			cli.Close()
		}
		return err
	}
	if err := signIn(); err != nil {
		t.Fatalf("the snapshot user before: %v", err)
	}
	without := map[string]string{}
	for k, v := range passwords {
		if k != etcdauth.Snapshotter {
			without[k] = v
		}
	}
	applied, err := etcdauth.Apply(ctx, client(t, c, "root"), etcdauth.DefaultSpec("root-pw", without), etcdauth.Options{})
	if err != nil || applied.UsersDeleted != 1 {
		t.Fatalf("apply without snapshots: %+v, %v; want the snapshot user deleted", applied, err)
	}
	if err := signIn(); err == nil {
		t.Fatal("the snapshot user still signs in after its region stopped snapshotting")
	}
	// Again: nothing to delete, nothing changed.
	if applied, err := etcdauth.Apply(ctx, client(t, c, "root"), etcdauth.DefaultSpec("root-pw", without), etcdauth.Options{}); err != nil || applied.Changed() {
		t.Fatalf("a second apply: %+v, %v; want no change", applied, err)
	}
	bad := etcdauth.DefaultSpec("root-pw", passwords)
	bad.Absent = []string{etcdauth.Snapshotter}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "both a user of the spec") {
		t.Fatalf("a user both listed and absent: %v", err)
	}
}
