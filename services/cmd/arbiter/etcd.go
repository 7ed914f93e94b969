package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/credfile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdRoles are the lines of --etcd-credentials: the etcd users
// (services/etcdauth) the lock path, the Admin API and the audit tailers
// sign in as, so etcd itself keeps each to its own key space.
var etcdRoles = []string{"arbiter", "admin", "tailer"}

// etcdUsers is one cluster signed in as each of the arbiter process's
// etcd users. Without authentication the three are one client.
type etcdUsers struct {
	lock, admin, tailer *clientv3.Client
}

func (u etcdUsers) close() {
	for _, c := range []*clientv3.Client{u.lock, u.admin, u.tailer} {
		if c != nil {
			c.Close() // closing one client twice is harmless
		}
	}
}

// etcdAccounts reads --etcd-credentials, or returns nil where
// --etcd-without-auth opts out. One of the two is required: an arbiter
// whose clusters let any certificate of the CA write the lock log would
// have no etcd-side line between the lock path and force-release.
func (f flags) etcdAccounts() (map[string]credfile.Account, error) {
	switch {
	case f.etcdCredentials != "" && f.etcdWithoutAuth:
		return nil, errors.New("--etcd-credentials and --etcd-without-auth: choose one")
	case f.etcdWithoutAuth:
		return nil, nil
	case f.etcdCredentials == "":
		return nil, errors.New("--etcd-credentials FILE is required (" + credfile.Rule(etcdRoles...) +
			"), or --etcd-without-auth for clusters with etcd authentication off (trials and tests only)")
	}
	accounts, err := credfile.Read("--etcd-credentials", f.etcdCredentials, etcdRoles...)
	if err != nil {
		return nil, err
	}
	// Three roles are three users, and none is root: one user for two
	// roles, or root, gives etcd nothing to keep apart.
	seen := map[string]string{}
	for _, role := range etcdRoles {
		u := accounts[role].User
		switch {
		case u == etcdauth.RootUser || u == etcdauth.Snapshotter:
			// Both have etcd's root role: an arbiter never holds it.
			return nil, fmt.Errorf("--etcd-credentials: %s: the %s line names %s, a user of etcd's root role; each line must name its own etcd user (see docs/etcd-roles.md)", f.etcdCredentials, role, u)
		case seen[u] != "":
			return nil, fmt.Errorf("--etcd-credentials: %s: the %s and %s lines name one user; each line must name its own etcd user (see docs/etcd-roles.md)", f.etcdCredentials, seen[u], role)
		}
		seen[u] = role
	}
	return accounts, nil
}

// requireAuth refuses a cluster whose authentication is off while the
// arbiter was given etcd users: signing in to such a cluster quietly
// carries no user, and the separation the users stand for would be gone
// with nothing saying so. A cluster that does not answer in time is
// logged and let through: the arbiter must start while etcd is down, and
// the next start checks again.
func requireAuth(ctx context.Context, name string, u etcdUsers, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := u.lock.AuthStatus(ctx)
	switch {
	case err != nil:
		log.Warn("could not confirm etcd authentication is on", "cluster", name, "err", err)
	case !st.Enabled:
		return fmt.Errorf("--etcd-credentials: cluster %s has etcd authentication off: enable it (lockplane up does), or run with --etcd-without-auth", name)
	}
	return nil
}

// openEtcd signs in to the cluster at the comma-separated endpoints as
// each user of accounts (one client, no user, when accounts is nil).
func openEtcd(endpoints string, tlsCfg *tls.Config, accounts map[string]credfile.Account) (etcdUsers, error) {
	dial := func(a credfile.Account) (*clientv3.Client, error) {
		return etcdauth.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), TLS: tlsCfg, DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Username: a.User, Password: a.Password})
	}
	if accounts == nil {
		c, err := dial(credfile.Account{})
		return etcdUsers{c, c, c}, err
	}
	var u etcdUsers
	for role, to := range map[string]**clientv3.Client{"arbiter": &u.lock, "admin": &u.admin, "tailer": &u.tailer} {
		c, err := dial(accounts[role])
		if err != nil {
			u.close()
			return etcdUsers{}, fmt.Errorf("--etcd-credentials %s: %w", role, err)
		}
		*to = c
	}
	return u, nil
}
