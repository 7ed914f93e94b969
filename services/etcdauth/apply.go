package etcdauth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultOpTimeout bounds each etcd request of Apply when Options give none.
const DefaultOpTimeout = 5 * time.Second

// Options tune Apply.
type Options struct {
	// OpTimeout bounds each etcd request; DefaultOpTimeout when zero. The
	// caller's context bounds the whole.
	OpTimeout time.Duration
}

// Applied reports what Apply changed; all zero on a cluster that already
// matched the spec.
type Applied struct {
	RolesAdded, UsersAdded, UsersDeleted, PermsGranted, PermsRevoked int
	RolesGranted, RolesRevoked, PasswordsSet                         int
	// AuthEnabled is true when this call enabled authentication.
	AuthEnabled bool
}

// Changed reports whether Apply changed anything.
func (a Applied) Changed() bool { return a != Applied{} }

// Apply makes the cluster's users and roles those of spec and enables
// authentication, through root, a client that is the root user once auth
// is on (Username root, Password spec.RootPassword; before auth is on, any
// client is). It is idempotent: each role's permissions and each user's
// roles are compared with the cluster's and only the difference is
// granted or revoked (so a second Apply bumps no auth revision, which
// would make every client re-authenticate); a permission or a role the
// spec no longer names is revoked; a password is set only when it does
// not authenticate (root's last: the client given, signed in with the old
// one, is then signed out). Roles and users the spec does not name are left alone
// (another tool's, or a retired one to delete by hand). Every request
// runs under its own deadline (Options.OpTimeout).
func Apply(ctx context.Context, root *clientv3.Client, spec Spec, opts Options) (Applied, error) {
	if err := spec.Validate(); err != nil {
		return Applied{}, err
	}
	timeout := opts.OpTimeout
	if timeout <= 0 {
		timeout = DefaultOpTimeout
	}
	ap := applier{c: root, timeout: timeout}
	var out Applied
	enabled, err := ap.enabled(ctx)
	if err != nil {
		return out, err
	}
	// Root first: enabling auth needs it, and once auth is on it is the
	// only user that may change the rest. A new root password is set
	// last: setting it ends the sessions of the client doing all this,
	// which signs in with the old one.
	rootUser := User{Name: RootUser, Password: spec.RootPassword, Roles: []string{RootRole}}
	rootPassword, err := ap.user(ctx, rootUser, enabled, true, &out)
	if err != nil {
		return out, err
	}
	for _, r := range spec.Roles {
		if err := ap.role(ctx, r, &out); err != nil {
			return out, err
		}
	}
	for _, u := range spec.Users {
		if _, err := ap.user(ctx, u, enabled, false, &out); err != nil {
			return out, err
		}
	}
	for _, name := range spec.Absent {
		err := ap.do(ctx, func(ctx context.Context) error { _, err := root.UserDelete(ctx, name); return err })
		switch {
		case err == nil:
			out.UsersDeleted++
		case !errors.Is(err, rpctypes.ErrUserNotFound):
			return out, fmt.Errorf("etcdauth: user %s: delete (it must not exist): %w", name, err)
		}
	}
	if !enabled {
		if err := ap.do(ctx, func(ctx context.Context) error { _, err := root.AuthEnable(ctx); return err }); err != nil {
			return out, fmt.Errorf("etcdauth: enable authentication: %w", err)
		}
		out.AuthEnabled = true
	}
	if rootPassword {
		if err := ap.password(ctx, rootUser); err != nil {
			return out, err
		}
		out.PasswordsSet++
	}
	return out, nil
}

func (a applier) password(ctx context.Context, u User) error {
	if err := a.do(ctx, func(ctx context.Context) error {
		_, err := a.c.UserChangePassword(ctx, u.Name, u.Password)
		return err
	}); err != nil {
		return fmt.Errorf("etcdauth: user %s: set the password: %w", u.Name, err)
	}
	return nil
}

type applier struct {
	c       *clientv3.Client
	timeout time.Duration
}

// do runs one request under its own deadline.
func (a applier) do(ctx context.Context, f func(context.Context) error) error {
	octx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	return f(octx)
}

// enabled reports whether authentication is on. AuthStatus is the root's
// once it is; before, anyone's.
func (a applier) enabled(ctx context.Context) (bool, error) {
	var on bool
	err := a.do(ctx, func(ctx context.Context) error {
		st, err := a.c.AuthStatus(ctx)
		if err == nil {
			on = st.Enabled
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("etcdauth: read the authentication status (is the client the root user?): %w", err)
	}
	return on, nil
}

// role adds r if it is missing and makes its permissions r's.
func (a applier) role(ctx context.Context, r Role, out *Applied) error {
	var have []*authpb.Permission
	err := a.do(ctx, func(ctx context.Context) error {
		resp, err := a.c.RoleGet(ctx, r.Name)
		if err == nil {
			have = resp.Perm
		}
		return err
	})
	if errors.Is(err, rpctypes.ErrRoleNotFound) {
		err = a.do(ctx, func(ctx context.Context) error { _, err := a.c.RoleAdd(ctx, r.Name); return err })
		out.RolesAdded++
	}
	if err != nil {
		return fmt.Errorf("etcdauth: role %s: %w", r.Name, err)
	}
	type rng struct{ key, end string }
	want := map[rng]authpb.Permission_Type{}
	for _, p := range r.Perms {
		k, e := p.keyRange()
		want[rng{k, e}] = authpb.Permission_Type(p.Access.etcd())
	}
	got := map[rng]authpb.Permission_Type{}
	for _, p := range have {
		got[rng{string(p.Key), string(p.RangeEnd)}] = p.PermType
	}
	for k := range got {
		if _, ok := want[k]; ok {
			continue
		}
		if err := a.do(ctx, func(ctx context.Context) error {
			_, err := a.c.RoleRevokePermission(ctx, r.Name, k.key, k.end)
			return err
		}); err != nil {
			return fmt.Errorf("etcdauth: role %s: revoke [%q, %q): %w", r.Name, k.key, k.end, err)
		}
		out.PermsRevoked++
	}
	// In the spec's order, so that a failure is reported on the first.
	for _, p := range r.Perms {
		k, e := p.keyRange()
		if t, ok := got[rng{k, e}]; ok && t == want[rng{k, e}] {
			continue
		}
		// A grant of a range the role has replaces its access.
		if err := a.do(ctx, func(ctx context.Context) error {
			_, err := a.c.RoleGrantPermission(ctx, r.Name, k, e, p.Access.etcd())
			return err
		}); err != nil {
			return fmt.Errorf("etcdauth: role %s: grant %s: %w", r.Name, p, err)
		}
		out.PermsGranted++
	}
	return nil
}

// user adds u if it is missing, sets its password unless it authenticates
// already (or, with later, reports that it must be set), and makes its
// roles u's.
func (a applier) user(ctx context.Context, u User, authOn, later bool, out *Applied) (setPassword bool, err error) {
	var have []string
	err = a.do(ctx, func(ctx context.Context) error {
		resp, err := a.c.UserGet(ctx, u.Name)
		if err == nil {
			have = resp.Roles
		}
		return err
	})
	switch {
	case errors.Is(err, rpctypes.ErrUserNotFound):
		if err := a.do(ctx, func(ctx context.Context) error {
			_, err := a.c.UserAdd(ctx, u.Name, u.Password)
			return err
		}); err != nil {
			return false, fmt.Errorf("etcdauth: add user %s: %w", u.Name, err)
		}
		out.UsersAdded++
	case err != nil:
		return false, fmt.Errorf("etcdauth: user %s: %w", u.Name, err)
	default:
		// Only an enabled cluster can say whether the password is right;
		// before, setting it costs nobody a token.
		ok := false
		if authOn {
			ok = a.do(ctx, func(ctx context.Context) error {
				_, err := a.c.Authenticate(ctx, u.Name, u.Password)
				return err
			}) == nil
		}
		switch {
		case ok:
		case later:
			setPassword = true
		default:
			if err := a.password(ctx, u); err != nil {
				return false, err
			}
			out.PasswordsSet++
		}
	}
	for _, r := range have {
		if slices.Contains(u.Roles, r) {
			continue
		}
		if err := a.do(ctx, func(ctx context.Context) error {
			_, err := a.c.UserRevokeRole(ctx, u.Name, r)
			return err
		}); err != nil {
			return false, fmt.Errorf("etcdauth: user %s: revoke role %s: %w", u.Name, r, err)
		}
		out.RolesRevoked++
	}
	for _, r := range u.Roles {
		if slices.Contains(have, r) {
			continue
		}
		if err := a.do(ctx, func(ctx context.Context) error {
			_, err := a.c.UserGrantRole(ctx, u.Name, r)
			return err
		}); err != nil {
			return false, fmt.Errorf("etcdauth: user %s: grant role %s: %w", u.Name, r, err)
		}
		out.RolesGranted++
	}
	return setPassword, nil
}
