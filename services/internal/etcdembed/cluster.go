// Package etcdembed runs a real etcd 3.6 cluster inside the current process:
// the embedded default of `make dev`, and the cluster the tests and the core
// benchmark run against. Every member is a full etcd server (raft, WAL with
// fsync, bbolt) on its own loopback ports; nothing is simulated.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockplane/lockplane/dr/restore"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/loopport"
	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnap "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/features"
	"go.uber.org/zap"
)

// Config shapes an embedded cluster.
type Config struct {
	// Dir holds one data directory per member. It must be empty or absent:
	// an embedded cluster is always created fresh.
	Dir string
	// Members is the member count; 3 when zero.
	Members int
	// Logger receives etcd's own logs; discarded when nil.
	Logger *zap.Logger
	// TickMs and ElectionMs tune raft; etcd's defaults (100, 1000) when zero.
	TickMs, ElectionMs uint
	// StartTimeout bounds the wait for the cluster to elect a leader.
	StartTimeout time.Duration
	// MaxRequestBytes caps one request etcd accepts; etcd's default (1.5
	// MiB) when zero. Tests set it small to see etcd refuse a large one.
	MaxRequestBytes uint
	// RestoreFrom, when set, is a snapshot every member is restored from
	// with etcdutl before it starts, as a disaster recovery does. The
	// restored cluster has a new cluster ID and the snapshot's revision.
	RestoreFrom string
	// Auth, when set, is applied once the cluster is up (and again after
	// a Rebuild): its users and roles are created and authentication is
	// enabled, so every client must then sign in as one of its users
	// (ClientConfig). Nil keeps authentication off, the default.
	Auth *etcdauth.Spec
	// AuthTokenTTL is how long an auth token lives; etcdauth.TokenTTL when
	// zero. Tests shorten it to see tokens expire.
	AuthTokenTTL time.Duration
}

// Cluster is a running embedded cluster. Members can be stopped and started
// again on the same ports and data, to take quorum away and give it back.
type Cluster struct {
	mu      sync.Mutex
	configs []*embed.Config
	members []*embed.Etcd // nil while stopped
	auth    *etcdauth.Spec
}

// Start creates and starts a cluster and returns once every member is ready.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	n := cfg.Members
	if n == 0 {
		n = 3
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if entries, err := os.ReadDir(cfg.Dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("etcdembed: data dir %s is not empty; an embedded cluster always starts fresh", cfg.Dir)
	}
	ports, err := loopport.Reserve(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{configs: make([]*embed.Config, n), members: make([]*embed.Etcd, n), auth: cfg.Auth}
	var initial []string
	for i := 0; i < n; i++ {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
	}
	token := fmt.Sprintf("lockplane-embedded-%d", time.Now().UnixNano())
	var authToken string
	if cfg.Auth != nil {
		ttl := cfg.AuthTokenTTL
		if ttl == 0 {
			ttl = etcdauth.TokenTTL
		}
		if authToken, err = jwtAuthToken(cfg.Dir, ttl); err != nil {
			return nil, err
		}
	}
	for i := 0; i < n; i++ {
		ec, err := memberConfig(cfg, i, ports[2*i], ports[2*i+1], strings.Join(initial, ","), token)
		if err != nil {
			return nil, err
		}
		if authToken != "" {
			ec.AuthToken = authToken
		}
		if cfg.RestoreFrom != "" {
			if err := restoreMember(cfg, ec, initial, token); err != nil {
				return nil, err
			}
		}
		c.configs[i] = ec
	}
	// Members must start together: each waits for a quorum of peers.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range c.configs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = c.StartMember(ctx, i, cfg.StartTimeout)
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.applyAuth(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// applyAuth applies the cluster's auth spec, if it has one, as root.
func (c *Cluster) applyAuth(ctx context.Context) error {
	if c.auth == nil {
		return nil
	}
	root, err := clientv3.New(c.ClientConfig(etcdauth.RootUser))
	if err != nil {
		return fmt.Errorf("etcdembed: root client: %w", err)
	}
	defer root.Close()
	if _, err := etcdauth.Apply(ctx, root, *c.auth, etcdauth.Options{}); err != nil {
		return fmt.Errorf("etcdembed: %w", err)
	}
	return nil
}

// Credentials are the passwords of the auth spec's users by name, root's
// included; nil when the cluster runs without authentication.
func (c *Cluster) Credentials() map[string]string {
	if c.auth == nil {
		return nil
	}
	out := c.auth.Credentials()
	out[etcdauth.RootUser] = c.auth.RootPassword
	return out
}

// ClientConfig is a client configuration for the cluster as user: its
// endpoints and, when authentication is on, the user's name and password.
// An unknown user (or "" for none) gets no credentials, and etcd refuses
// its requests once authentication is on.
func (c *Cluster) ClientConfig(user string) clientv3.Config {
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if pw, ok := c.Credentials()[user]; ok {
		cfg.Username, cfg.Password = user, pw
	}
	return cfg
}

func memberConfig(cfg Config, i, clientPort, peerPort int, initial, token string) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = fmt.Sprintf("m%d", i+1)
	ec.Dir = filepath.Join(cfg.Dir, ec.Name)
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = initial
	ec.InitialClusterToken = token
	ec.ClusterState = embed.ClusterStateFlagNew
	if cfg.TickMs != 0 {
		ec.TickMs = cfg.TickMs
	}
	if cfg.ElectionMs != 0 {
		ec.ElectionMs = cfg.ElectionMs
	}
	if cfg.MaxRequestBytes != 0 {
		ec.MaxRequestBytes = cfg.MaxRequestBytes
	}
	// Lease checkpointing carries a lease's remaining TTL across a leader
	// change instead of resetting it (ADR-05).
	if err := ec.ServerFeatureGate.(interface{ Set(string) error }).Set(
		fmt.Sprintf("%s=true,%s=true", features.LeaseCheckpoint, features.LeaseCheckpointPersist)); err != nil {
		return nil, fmt.Errorf("etcdembed: feature gates: %w", err)
	}
	// No HTTP/JSON gateway: it holds a client connection that makes every
	// stop wait out the graceful-shutdown timeout.
	ec.EnableGRPCGateway = false
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.With(zap.String("member", ec.Name)))
	return ec, nil
}

// StartMember starts member i (again) and waits until it is ready to serve.
func (c *Cluster) StartMember(ctx context.Context, i int, timeout time.Duration) error {
	c.mu.Lock()
	if c.members[i] != nil {
		c.mu.Unlock()
		return fmt.Errorf("etcdembed: member %d is already running", i)
	}
	cfg := c.configs[i]
	c.mu.Unlock()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdembed: start %s: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdembed: %s failed: %w", cfg.Name, err)
	case <-time.After(timeout):
		e.Close()
		return fmt.Errorf("etcdembed: %s not ready after %s", cfg.Name, timeout)
	case <-ctx.Done():
		e.Close()
		return ctx.Err()
	}
	c.mu.Lock()
	c.members[i] = e
	c.mu.Unlock()
	return nil
}

// StopMember stops member i, keeping its data and ports for StartMember.
func (c *Cluster) StopMember(i int) {
	c.mu.Lock()
	e := c.members[i]
	c.members[i] = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Rebuild stops every member, deletes its data and starts the cluster again
// empty, on the same ports, with a new initial-cluster-token: as an
// operator who rebuilds a lost cluster from nothing would. It has a new
// cluster ID and its revisions start again from 1. A cluster with an auth
// spec has it applied again, as a rebuild's bootstrap would.
func (c *Cluster) Rebuild(ctx context.Context, timeout time.Duration) error {
	c.Close()
	token := fmt.Sprintf("lockplane-embedded-%d", time.Now().UnixNano())
	for _, cfg := range c.configs {
		if err := os.RemoveAll(cfg.Dir); err != nil {
			return err
		}
		cfg.InitialClusterToken, cfg.ClusterState = token, embed.ClusterStateFlagNew
	}
	// Every member at once: a new multi-member cluster forms only together.
	errs := make([]error, len(c.configs))
	var wg sync.WaitGroup
	for i := range c.configs {
		wg.Go(func() { errs[i] = c.StartMember(ctx, i, timeout) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.applyAuth(ctx)
}

// Endpoints are the client URLs of all members, running or not.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, cfg := range c.configs {
		eps = append(eps, cfg.AdvertiseClientUrls[0].String())
	}
	return eps
}

// Size is the number of members, running or not.
func (c *Cluster) Size() int { return len(c.configs) }

// Close stops every member. One at a time: a leader stopping while its
// peers stop too waits out etcd's whole leadership-transfer timeout.
func (c *Cluster) Close() {
	for i := range c.configs {
		c.StopMember(i)
	}
}

// restoreMember writes ec's data directory from cfg.RestoreFrom, as a member
// of the cluster initial names, under the new token.
func restoreMember(cfg Config, ec *embed.Config, initial []string, token string) error {
	rc := restore.Cluster{Snapshot: cfg.RestoreFrom, Token: token, Logger: cfg.Logger}
	for _, entry := range initial {
		name, peer, _ := strings.Cut(entry, "=")
		m := restore.Member{Name: name, PeerURL: peer}
		if name == ec.Name {
			m.DataDir = ec.Dir // the others' are written by their own calls
		}
		rc.Members = append(rc.Members, m)
	}
	if err := rc.Member(ec.Name); err != nil {
		return fmt.Errorf("etcdembed: %w", err)
	}
	return nil
}

// Snapshot saves a snapshot of the cluster's data, taken from one member,
// to path: what an operator's backup job does.
func (c *Cluster) Snapshot(ctx context.Context, path string) error {
	cfg := c.ClientConfig(etcdauth.RootUser) // a snapshot is root's once auth is on
	cfg.Endpoints = cfg.Endpoints[:1]
	_, err := clientsnap.SaveWithVersion(ctx, zap.NewNop(), cfg, path)
	return err
}
