package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/etcdauth"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdAuthInputs apply Lockplane's etcd users and roles to a deployed
// cluster and enable authentication (services/etcdauth, ADR-20): the
// arbiter, admin and tailer users with their passwords, and root's, which
// only bootstrap steps use. The cluster is reached over TLS with a client
// certificate of the region's etcd CA and signs in as root.
//
// Once this has run, etcd takes a client certificate's common name as the
// user name of a request that carries no password, so a certificate alone
// (the deployer's, lockplane-deployer) no longer reads or writes anything:
// every later step that reads or writes keys must sign in as root or run
// before this one. `up` does both for the epoch bootstrap (EtcdEpoch signs
// in with rootPassword, and the program orders EtcdAuth after it); the
// EtcdCluster readiness check asks only Status and MemberList, which the
// certificate's common name is enough for.
type EtcdAuthInputs struct {
	Endpoints []string `json:"endpoints"`
	CACertPem string   `json:"caCertPem"`
	CertPem   string   `json:"certPem"`
	KeyPem    string   `json:"keyPem"`

	RootPassword    string `json:"rootPassword"`
	ArbiterPassword string `json:"arbiterPassword"`
	AdminPassword   string `json:"adminPassword"`
	TailerPassword  string `json:"tailerPassword"`
	// SnapshotPassword, when set, makes the snapshot job's user (etcd's
	// root role: etcd serves snapshots to no other); a region without a
	// snapshot store has no such user.
	SnapshotPassword string `json:"snapshotPassword,omitempty"`
	// RestoredAt, for a shard restored in place, is the restore's time: a
	// new one applies the spec again (an update), since the snapshot
	// brought back the users and passwords it was taken with.
	RestoredAt string `json:"restoredAt,omitempty"`
}

func (in *EtcdAuthInputs) spec() etcdauth.Spec {
	return etcdauth.DefaultSpec(in.RootPassword, map[string]string{
		etcdauth.Arbiter: in.ArbiterPassword, etcdauth.Admin: in.AdminPassword, etcdauth.Tailer: in.TailerPassword,
		etcdauth.Snapshotter: in.SnapshotPassword,
	})
}

// client reaches the cluster as root with rootPassword.
func (in *EtcdAuthInputs) client(rootPassword string) (*clientv3.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(in.CACertPem)) {
		return nil, errors.New("caCertPem: no certificate")
	}
	cert, err := tls.X509KeyPair([]byte(in.CertPem), []byte(in.KeyPem))
	if err != nil {
		return nil, fmt.Errorf("certPem, keyPem: %v", err)
	}
	return clientv3.New(clientv3.Config{Endpoints: in.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS:      &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Username: etcdauth.RootUser, Password: rootPassword})
}

// apply applies the spec, signed in with the first of the root passwords
// that etcd accepts (the new one, else the old one, which the apply then
// changes).
func (in *EtcdAuthInputs) apply(ctx context.Context, rootPasswords ...string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	for _, pw := range slices.Compact(rootPasswords) {
		cli, err := in.client(pw)
		if errors.Is(err, rpctypes.ErrAuthFailed) {
			errs = append(errs, err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("etcd auth: reach %s: %w", strings.Join(in.Endpoints, ","), err)
		}
		_, err = etcdauth.Apply(ctx, cli, in.spec(), etcdauth.Options{})
		cli.Close()
		if err != nil {
			return nil, fmt.Errorf("etcd auth: %w", err)
		}
		return in.outputs(), nil
	}
	return nil, fmt.Errorf("etcd auth: root could not sign in with the root password given (nor the previous one): %w", errors.Join(errs...))
}

func (in *EtcdAuthInputs) outputs() map[string]any {
	var users, roles []any
	for _, u := range in.spec().Users {
		users = append(users, u.Name)
	}
	for _, r := range in.spec().Roles {
		roles = append(roles, r.Name)
	}
	return map[string]any{"authEnabled": true, "users": users, "roles": roles}
}

func init() {
	register("EtcdAuth", spec[EtcdAuthInputs]{
		Validate: func(in *EtcdAuthInputs) error {
			if len(in.Endpoints) == 0 {
				return errors.New("endpoints: at least one is required")
			}
			if in.CACertPem == "" || in.CertPem == "" || in.KeyPem == "" {
				return errors.New("caCertPem, certPem, keyPem: the cluster is reached over TLS with a client certificate")
			}
			return in.spec().Validate()
		},
		Create: func(ctx context.Context, _ *Env, in *EtcdAuthInputs) (string, map[string]any, error) {
			out, err := in.apply(ctx, in.RootPassword)
			if err != nil {
				return "", nil, err
			}
			return "etcd-auth-" + sum(strings.Join(in.Endpoints, ","))[:12], out, nil
		},
		// A changed password is set; a changed root password signs in
		// with the old one to set the new.
		Update: func(ctx context.Context, _ *Env, _ string, olds, news *EtcdAuthInputs, _ map[string]any) (map[string]any, error) {
			return news.apply(ctx, news.RootPassword, olds.RootPassword)
		},
		Replaces: []string{"endpoints"},
		// Refresh reports the resource gone when the cluster answers that
		// authentication is off (a cluster rebuilt empty has no users), so
		// the next up applies the spec again; otherwise it changes
		// nothing (a changed input is what applies it again).
		Read: func(ctx context.Context, _ *Env, _ string, in *EtcdAuthInputs, st map[string]any) (map[string]any, error) {
			cli, err := in.client(in.RootPassword)
			if err != nil {
				return st, nil // unreachable or root refused: nothing known to change
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			s, err := cli.AuthStatus(ctx)
			switch {
			case err != nil:
				return st, nil
			case !s.Enabled:
				return nil, nil
			}
			st["authEnabled"] = true
			return st, nil
		},
		// Deleting the resource leaves authentication on: turning it off
		// would open every key to every certificate of the CA.
		Delete:  nil,
		Secrets: []string{"keyPem", "rootPassword", "arbiterPassword", "adminPassword", "tailerPassword", "snapshotPassword"},
	})
}
