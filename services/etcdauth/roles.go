// Package etcdauth defines Lockplane's etcd users and roles as data and
// applies them to a cluster (ADR-20): the lock path, the Admin API and the
// audit tailer each reach etcd as their own user, whose role names exactly
// the key ranges that path reads and writes, so etcd itself refuses a write
// outside them. No person holds an etcd credential: operators act through
// the Admin API (docs/etcd-roles.md).
//
// What etcd 3.6 checks, with auth enabled (server/etcdserver/apply/
// apply_auth.go, server/etcdserver/v3_server.go, api/v3rpc/watch.go):
//
//   - Range and Watch: read on the whole requested range. A prefix read
//     or watch of /l/ needs read on all of [/l/, /l0); a grant on every
//     key in it does not do, a grant on the prefix does. Ranges granted
//     to one user by several roles are merged before the check.
//   - Put: write on the key; with a lease, write on every key already
//     attached to that lease as well; with prevKV, read on the key.
//   - DeleteRange: write on the whole range (read too with prevKV).
//   - Txn: read on every compare's key or range (a WithPrefix compare
//     needs its whole range), and every op of both branches, nested Txns
//     included, as if sent alone, whichever branch runs.
//   - LeaseGrant: only an authenticated user; no key permission.
//   - LeaseRevoke and LeaseKeepAlive: write on every key attached to the
//     lease. Revoking a session therefore needs write on all its holds,
//     waiters, session record and closing mark.
//   - LeaseTimeToLive: read on every key attached to the lease (with or
//     without WithAttachedKeys); LeaseLeases: read on every key of every
//     lease.
//   - Status, MemberList, Alarm GET, watch progress requests: only an
//     authenticated user. Auth, member changes, snapshots, defragment,
//     hash, alarm disarm: the root role.
//
// etcd has no delete-only permission: write allows both put and delete.
package etcdauth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Access is what a permission allows on its keys.
type Access int

// The kinds of access etcd grants.
const (
	Read Access = iota + 1
	Write
	ReadWrite
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "readwrite"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

func (a Access) etcd() clientv3.PermissionType {
	switch a {
	case Read:
		return clientv3.PermissionType(clientv3.PermRead)
	case Write:
		return clientv3.PermissionType(clientv3.PermWrite)
	}
	return clientv3.PermissionType(clientv3.PermReadWrite)
}

// Perm is one key permission of a role: one key, or every key under a
// prefix, with why the path needs it.
type Perm struct {
	Access Access
	Key    string
	Prefix bool
	Why    string
}

// keyRange is the permission's range as etcd stores it: rangeEnd empty for
// a single key.
func (p Perm) keyRange() (key, rangeEnd string) {
	if p.Prefix {
		return p.Key, clientv3.GetPrefixRangeEnd(p.Key)
	}
	return p.Key, ""
}

// String is the permission as the role table shows it.
func (p Perm) String() string {
	if p.Prefix {
		return fmt.Sprintf("%s %s*", p.Access, p.Key)
	}
	return fmt.Sprintf("%s %s", p.Access, p.Key)
}

// Role is a named set of key permissions.
type Role struct {
	Name  string
	Perms []Perm
	// Doc says which path uses the role.
	Doc string
}

// User is an etcd user with its password and roles.
type User struct {
	Name, Password string
	Roles          []string
}

// Spec is every role and user of a cluster, and the root password that
// bootstrap alone uses.
type Spec struct {
	Roles []Role
	Users []User
	// Absent are users that must not exist: Apply deletes them. The
	// snapshot user is absent from a cluster without snapshots, so a user
	// of the root role outlives no need for it.
	Absent []string
	// RootPassword is the root user's: the bootstrap's credential (Apply,
	// the epoch bootstrap), never a service's or a person's.
	RootPassword string
}

// RootUser is etcd's superuser; RootRole its role.
const (
	RootUser = "root"
	RootRole = "root"
)

// The users and roles of Lockplane's paths.
const (
	Arbiter       = "arbiter"
	Admin         = "admin"
	AdminSessions = "admin-sessions"
	Tailer        = "tailer"
	// Snapshotter is the snapshot job's user (dr/snapshot). etcd serves a
	// snapshot only to the root role, so it has that role: its password
	// lives only on the cluster's own member hosts, which hold the data
	// already, never on an arbiter.
	Snapshotter = "snapshot"
)

// Key prefixes that have no constant of their own elsewhere, or whose
// package is too heavy to import here (the audit's, with its stores): the
// coord cluster's shard lease records (lockkey.ShardLeasesOf,
// lockkey.ShardLeaseOwner), force-release records and requests
// (audit.ForcePrefix) and the audit's elections and checkpoints
// (audit.ElectionPrefix, audit.CheckpointPrefix, tailers.ArchiveElection).
// A test holds them equal to the packages'.
const (
	ForcePrefix           = "/sys/force/"
	ShardLeasePrefix      = "/sl/"
	ShardLeaseOwnerPrefix = "/slo/"
	AuditPrefix           = "/sys/audit/"
)

// Roles are Lockplane's roles. One set serves every cluster: keys that only
// the coord cluster has (the shard map, epoch allocation, shard lease
// records, the audit's elections and checkpoints, two-person requests)
// simply never exist on an entity shard.
func Roles() []Role {
	return []Role{
		{Name: Arbiter, Doc: "the lock path: sessions, grants, waits, releases, handoffs, keepalives, inspect (services/internal/arbiter)", Perms: []Perm{
			{ReadWrite, lockkey.HoldPrefix, true, "holds: grant puts on the session's lease, handoff puts and deletes, release and release-any delete; every grant compares the hold"},
			{ReadWrite, lockkey.WaitPrefix, true, "durable waiters: a wait puts its key on the session's lease and deletes it; the queue compares the waiters' prefix"},
			{ReadWrite, lockkey.SessionPrefix, true, "session records: OpenSession puts one on the new lease; grants compare it"},
			{ReadWrite, lockkey.ClosingPrefix, true, "closing marks: CloseSession puts one on the lease before revoking it"},
			{ReadWrite, ShardLeasePrefix, true, "coord cluster: a session's lease on each entity shard, on the session's coord lease"},
			{ReadWrite, ShardLeaseOwnerPrefix, true, "coord cluster: which session a shard lease belongs to, on the session's coord lease"},
			{Read, lockkey.EpochKey, false, "every grant compares the epoch record; the seal watches it"},
			{Read, shardmap.Key, false, "the router loads and watches the shard map"},
			{Read, ForcePrefix, true, "keepalives report holds a force-release ended, from the force records"},
		}},
		{Name: Admin, Doc: "the Admin API: force-release, epoch advance, shard add, status (services/internal/arbiter admin path)", Perms: []Perm{
			{ReadWrite, lockkey.HoldPrefix, true, "force-release compares a hold's revision and value and deletes it; epoch advance deletes every hold (no delete-only permission exists)"},
			{ReadWrite, lockkey.WaitPrefix, true, "epoch advance deletes every waiter; shard add deletes the moving ranges' waiters"},
			{ReadWrite, ForcePrefix, true, "two-person requests (on a lease) and force records (on a 24-hour lease)"},
			{ReadWrite, lockkey.EpochKey, false, "epoch advance puts the new record; shard add stamps the map version into it"},
			{ReadWrite, epoch.AllocKey, false, "coord cluster: epoch allocation and the anchor put the allocation record"},
			{ReadWrite, epoch.HighestPrefix, true, "coord cluster: allocation records each cluster's highest epoch; the allocation compares the whole prefix"},
			{ReadWrite, shardmap.Key, false, "coord cluster: shard add stores the map's next versions"},
			{ReadWrite, lockkey.SessionPrefix, true, "epoch advance deletes every session record (the sessions opened before it end); force-release shows the holder's session and lists its holds (LeaseTimeToLive needs read on every key on the lease)"},
			{Read, lockkey.ClosingPrefix, true, "as above: a closing mark may be on the session's lease"},
			{Read, ShardLeasePrefix, true, "as above, coord cluster: shard lease records are on the session's coord lease"},
			{Read, ShardLeaseOwnerPrefix, true, "as above, coord cluster"},
		}},
		// Write on /s/ is the admin role's (the epoch advance deletes every
		// session record), so the force-release Txn's delete of one needs
		// nothing here; LeaseRevoke needs write on the lease's other keys.
		{Name: AdminSessions, Doc: "the Admin API's force-release --revoke-session: without this role etcd refuses to revoke a lease that carries a closing mark or shard lease records", Perms: []Perm{
			{Write, lockkey.ClosingPrefix, true, "LeaseRevoke needs write on every key on the lease: a closing mark may be on it"},
			{Write, ShardLeasePrefix, true, "LeaseRevoke of a coord session lease: its shard lease records are on it"},
			{Write, ShardLeaseOwnerPrefix, true, "as above"},
		}},
		{Name: Tailer, Doc: "the audit tailer and archiver (services/audit)", Perms: []Perm{
			{Read, "/", true, "the tailer watches the whole key space (\"/\" with prefix): etcd checks a watch's whole range"},
			{ReadWrite, AuditPrefix, true, "coord cluster: the tailers' and the archiver's elections (keys on their election leases) and checkpoints"},
		}},
	}
}

// DefaultSpec is Lockplane's roles with one user each, the given
// passwords by user name (arbiter, admin, tailer, and snapshot when given
// one), and root's.
func DefaultSpec(root string, passwords map[string]string) Spec {
	s := Spec{
		Roles: Roles(),
		Users: []User{
			{Name: Arbiter, Password: passwords[Arbiter], Roles: []string{Arbiter}},
			{Name: Admin, Password: passwords[Admin], Roles: []string{Admin, AdminSessions}},
			{Name: Tailer, Password: passwords[Tailer], Roles: []string{Tailer}},
		},
		RootPassword: root,
	}
	if pw := passwords[Snapshotter]; pw != "" {
		s.Users = append(s.Users, User{Name: Snapshotter, Password: pw, Roles: []string{RootRole}})
	} else {
		s.Absent = append(s.Absent, Snapshotter)
	}
	return s
}

// Validate checks a spec before anything is applied.
func (s Spec) Validate() error {
	var errs []error
	if s.RootPassword == "" {
		errs = append(errs, errors.New("etcdauth: the root password is required"))
	}
	for _, name := range s.Absent {
		if name == RootUser || slices.ContainsFunc(s.Users, func(u User) bool { return u.Name == name }) {
			errs = append(errs, fmt.Errorf("etcdauth: user %s: both a user of the spec (or root) and absent", name))
		}
	}
	roles := map[string]bool{}
	for _, r := range s.Roles {
		switch {
		case r.Name == "" || r.Name == RootRole:
			errs = append(errs, fmt.Errorf("etcdauth: role %q: a role needs a name, and root is etcd's own", r.Name))
		case roles[r.Name]:
			errs = append(errs, fmt.Errorf("etcdauth: role %q is defined twice", r.Name))
		}
		roles[r.Name] = true
		seen := map[[2]string]bool{}
		for _, p := range r.Perms {
			k, e := p.keyRange()
			switch {
			case p.Key == "":
				errs = append(errs, fmt.Errorf("etcdauth: role %s: a permission needs a key", r.Name))
			case p.Access < Read || p.Access > ReadWrite:
				errs = append(errs, fmt.Errorf("etcdauth: role %s: %s: unknown access %d", r.Name, p.Key, p.Access))
			case seen[[2]string{k, e}]:
				errs = append(errs, fmt.Errorf("etcdauth: role %s: %s is granted twice (etcd keeps one permission per range)", r.Name, p))
			}
			seen[[2]string{k, e}] = true
		}
	}
	users := map[string]bool{}
	for _, u := range s.Users {
		switch {
		case u.Name == "" || u.Name == RootUser:
			errs = append(errs, fmt.Errorf("etcdauth: user %q: a user needs a name, and root is the bootstrap's", u.Name))
		case users[u.Name]:
			errs = append(errs, fmt.Errorf("etcdauth: user %q is defined twice", u.Name))
		case u.Password == "":
			errs = append(errs, fmt.Errorf("etcdauth: user %s: a password is required", u.Name))
		}
		users[u.Name] = true
		for _, r := range u.Roles {
			switch {
			case r == RootRole && u.Name != Snapshotter:
				errs = append(errs, fmt.Errorf("etcdauth: user %s: only the %s user may have etcd's root role (a snapshot needs it)", u.Name, Snapshotter))
			case r != RootRole && !roles[r]:
				errs = append(errs, fmt.Errorf("etcdauth: user %s: role %q is not defined", u.Name, r))
			}
		}
	}
	return errors.Join(errs...)
}

// Role returns the named role of the spec.
func (s Spec) Role(name string) (Role, bool) {
	i := slices.IndexFunc(s.Roles, func(r Role) bool { return r.Name == name })
	if i < 0 {
		return Role{}, false
	}
	return s.Roles[i], true
}

// Credentials are the users' names and passwords, by user name: what each
// path's client needs (clientv3.Config Username, Password).
func (s Spec) Credentials() map[string]string {
	out := map[string]string{}
	for _, u := range s.Users {
		out[u.Name] = u.Password
	}
	return out
}

// Generated is DefaultSpec with fresh random passwords: an environment
// whose etcd data is new each start (`lockplane dev`, tests) and whose
// credentials no person needs to know.
func Generated() Spec {
	return DefaultSpec(rand.Text(), map[string]string{Arbiter: rand.Text(), Admin: rand.Text(), Tailer: rand.Text()})
}
