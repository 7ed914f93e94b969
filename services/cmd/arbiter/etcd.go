package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

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
func (f flags) etcdAccounts() (map[string]account, error) {
	switch {
	case f.etcdCredentials != "" && f.etcdWithoutAuth:
		return nil, errors.New("--etcd-credentials and --etcd-without-auth: choose one")
	case f.etcdWithoutAuth:
		return nil, nil
	case f.etcdCredentials == "":
		return nil, errors.New("--etcd-credentials FILE is required (" + credentialsRule(etcdRoles...) +
			"), or --etcd-without-auth for clusters with etcd authentication off (trials and tests only)")
	}
	return readCredentials("--etcd-credentials", f.etcdCredentials, etcdRoles...)
}

// openEtcd signs in to the cluster at the comma-separated endpoints as
// each user of accounts (one client, no user, when accounts is nil).
func openEtcd(endpoints string, tlsCfg *tls.Config, accounts map[string]account) (etcdUsers, error) {
	dial := func(a account) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), TLS: tlsCfg, DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Username: a.user, Password: a.password})
	}
	if accounts == nil {
		c, err := dial(account{})
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
