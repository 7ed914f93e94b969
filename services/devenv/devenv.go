// Package devenv is the embedded default: a real 3-member etcd 3.6 cluster
// in this process, an arbiter serving it over mTLS, and a development trust
// domain with SVIDs for a demo workload and two operators, all on loopback.
// `make dev` runs it; the tests and the core benchmark use it too, so what
// they measure is what a developer runs.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devca"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/internal/tailers"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TrustDomain is the development trust domain.
const TrustDomain = "lockplane.dev"

// The development identities, by profile name.
var Identities = map[string]string{
	"arbiter": "/arbiter",
	"demo":    "/ns/team-a/sa/demo",
	"other":   "/ns/team-b/sa/worker",
	"alice":   "/operator/alice",
	"bob":     "/operator/bob",
}

// Options shape an embedded environment.
type Options struct {
	// Dir receives the etcd data, the trust domain and profile.json. Its
	// etcd/ and pki/ subdirectories are recreated on every start.
	Dir string
	// Listen and MetricsListen are the arbiter's gRPC and /metrics
	// addresses; a free loopback port when empty.
	Listen, MetricsListen string
	// Classes overrides the class registry (tests use short TTLs).
	Classes class.Registry
	// Authorizer decides who may lock what. Exactly one of it and
	// AllowAnyWorkload is required, as for the arbiter
	// (arbiter.CheckAuthorization); Start refuses neither or both.
	Authorizer arbiter.Authorizer
	// AllowAnyWorkload lets every workload of the trust domain lock every
	// key, logged and exported as lockplane_authorization_open: `lockplane
	// dev` and the benchmarks set it; devenvtest.Start sets it for every
	// test that gives no Authorizer.
	AllowAnyWorkload bool
	// OpTimeout overrides the arbiter's bound on each etcd call.
	OpTimeout time.Duration
	// GroupCommit overrides the arbiter's Config.GroupCommit.
	GroupCommit int
	// PollInterval overrides a waiter's fallback poll period.
	PollInterval time.Duration
	// ValidateRate and ValidateBurst override ValidateToken's limit.
	ValidateRate  float64
	ValidateBurst int
	Logger        *slog.Logger
	// EtcdLogger receives etcd's logs; discarded when nil.
	EtcdLogger *zap.Logger
	// RestoreFrom starts the cluster from an etcd snapshot, as a disaster
	// recovery would: the arbiter then finds it sealed.
	RestoreFrom string
	// Workers adds identities worker-0 .. worker-(Workers-1), for
	// benchmarks that want distinct contenders.
	Workers int
	// Shards starts one embedded etcd cluster per name as the entity tier's
	// shards (ADR-07) and serves a Router over them and the coord cluster.
	// InitialShards are the shards of map version 1 (all of Shards when
	// nil); the rest are ready to be added with shardmap.Add.
	Shards, InitialShards []string
	// ShardMembers is each shard's member count; 1 when zero, to keep a
	// four-cluster environment light.
	ShardMembers int
	// Region is the arbiter's region and Homes where namespaces are homed
	// (ADR-08); with none, every namespace is served here.
	Region string
	Homes  arbiter.Homes
	// Quotas limits each identity's sessions and holds; none when nil.
	Quotas quota.Quotas
	// Operators verifies operators' ID tokens for the two-person actions
	// (force-release, epoch advance); they are refused without one.
	Operators admin.OperatorVerifier
	// ActionTTL overrides how long a two-person request lives (1 h).
	ActionTTL time.Duration
	// WrapEtcd, when set, wraps the coord cluster's client as the arbiter
	// sees it, for tests that act between two of the arbiter's etcd calls.
	WrapEtcd func(arbiter.Etcd) arbiter.Etcd
	// WrapAdminEtcd, when set, wraps the coord cluster's client as the
	// Admin API sees it (signed in as etcdauth.Admin), for tests that
	// record what the admin paths write.
	WrapAdminEtcd func(arbiter.Etcd) arbiter.Etcd
	// Audit, when set, is the audit store: a tailer of the coord cluster
	// and of each shard runs into it for the environment's lifetime, and the
	// admin API's audit queries read it. The caller migrates it first.
	Audit AuditStore
	// AuditReader, when set, answers the admin API's audit queries instead
	// of Audit: the same store as its read-only user, as the arbiter does.
	AuditReader audit.Reader
	// Archive, when set with Audit, is run by the tailers' process: the
	// embedded default has one, so it is always the elected archiver.
	Archive tailers.Archiver
	// EtcdAuth are every cluster's etcd users and roles: authentication is
	// always on, and the arbiter's lock path, its Admin API and the
	// tailers each sign in as their own user (docs/etcd-roles.md). Fresh
	// random passwords when nil; a restore (RestoreFrom) passes the
	// original's (Env.EtcdAuth), which the snapshot keeps.
	EtcdAuth *etcdauth.Spec
}

// AuditStore is where the embedded tailers write and the admin API reads:
// the ClickHouse store (chstore) is one.
type AuditStore interface {
	audit.Store
	audit.Reader
}

// Env is a running embedded environment.
type Env struct {
	Cluster *etcdembed.Cluster
	// Etcd is the coord cluster as etcd's root user, for tests and the
	// bootstrap; the services never use it.
	Etcd *clientv3.Client
	// Arbiter serves the lock service when no Router does; nil behind a
	// Router, whose arbiters are its own.
	Arbiter     *arbiter.Arbiter
	Addr        string
	MetricsAddr string
	Profile     *profile.Profile
	ProfilePath string
	Registry    *prometheus.Registry
	// AuditRegistry has the audit tailers' series (Options.Audit), which
	// outlive an arbiter's restart; /metrics serves both registries.
	AuditRegistry *prometheus.Registry
	// Router serves the lock service when Options.Shards or Options.Homes
	// is set; nil otherwise.
	Router *arbiter.Router
	// ShardClusters and ShardEtcd (as root) are the entity shards by name.
	ShardClusters map[string]*etcdembed.Cluster
	ShardEtcd     map[string]*clientv3.Client
	// EtcdAuth are the clusters' etcd users.
	EtcdAuth etcdauth.Spec

	// lockPath, adminPath and tailerPath are the clusters as the lock
	// path's, the Admin API's and the tailers' etcd users.
	lockPath, adminPath, tailerPath signedIn

	opts   Options
	cancel context.CancelFunc
	server *grpc.Server
	// served is what server serves: the Arbiter or the Router.
	served  arbiter.Service
	metrics *http.Server
	lis     net.Listener
	// stopAudit stops the tailers and returns once they have ended.
	stopAudit func()
}

// Start brings the environment up and returns once the arbiter serves.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	// The arbiter's rule, checked before anything starts, in Options' names.
	switch err := arbiter.CheckAuthorization(opts.Authorizer != nil, opts.AllowAnyWorkload); {
	case errors.Is(err, arbiter.ErrNoAuthorizer):
		return nil, errors.New("devenv: Options.Authorizer or Options.AllowAnyWorkload is required: without an Authorizer " +
			"every workload of the trust domain could lock every key; set AllowAnyWorkload to run open, as a trial does")
	case errors.Is(err, arbiter.ErrAuthorizerAndOpen):
		return nil, errors.New("devenv: Options.Authorizer and Options.AllowAnyWorkload: choose one; the Authorizer decides who may lock what")
	case err != nil:
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	for _, sub := range []string{"etcd", "shards", "pki"} {
		if err := os.RemoveAll(filepath.Join(opts.Dir, sub)); err != nil {
			return nil, err
		}
	}
	if opts.RestoreFrom != "" && opts.EtcdAuth == nil {
		return nil, errors.New("devenv: Options.RestoreFrom needs Options.EtcdAuth: the snapshot keeps the original users and root's password (the original's Env.EtcdAuth)")
	}
	e := &Env{opts: opts, EtcdAuth: etcdauth.Generated()}
	if opts.EtcdAuth != nil {
		e.EtcdAuth = *opts.EtcdAuth
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.Profile, err = WriteTrustDomain(opts.Dir, opts.Workers); err != nil {
		return nil, err
	}
	e.Cluster, err = etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(opts.Dir, "etcd"), Logger: opts.EtcdLogger,
		RestoreFrom: opts.RestoreFrom, Auth: &e.EtcdAuth})
	if err != nil {
		return nil, err
	}
	e.Etcd, err = clientv3.New(e.Cluster.ClientConfig(etcdauth.RootUser))
	if err != nil {
		return nil, err
	}
	if err := e.startShards(ctx); err != nil {
		return nil, err
	}
	for user, to := range map[string]*signedIn{etcdauth.Arbiter: &e.lockPath, etcdauth.Admin: &e.adminPath, etcdauth.Tailer: &e.tailerPath} {
		if *to, err = e.signIn(user); err != nil {
			return nil, err
		}
	}
	if opts.RestoreFrom == "" {
		// A new region: the explicit bootstrap step, as `lockplane up`
		// takes it. A restored one keeps its records and starts sealed.
		if err := e.bootstrap(ctx); err != nil {
			return nil, err
		}
	}
	if len(opts.Shards) > 0 {
		if _, err := shardmap.Init(ctx, e.Shardmap(), e.initialShards(), nil); err != nil {
			return nil, err
		}
	}
	e.startAudit()
	if err := e.StartArbiter(); err != nil {
		return nil, err
	}
	e.Profile.Endpoint = e.Addr
	e.Profile.Metrics = "http://" + e.MetricsAddr + "/metrics"
	e.ProfilePath = filepath.Join(opts.Dir, "profile.json")
	return e, e.Profile.Save(e.ProfilePath)
}

// WriteTrustDomain writes a fresh development CA, an SVID for each of
// Identities and of worker-0 .. worker-(workers-1) under dir/pki, and
// dir/profile.json naming them (its endpoint still "pending"), and returns
// the profile. Start uses it; so does a benchmark that runs the arbiter as
// its own process (benchmarks/scale), with the arbiter's SVID.
func WriteTrustDomain(dir string, workers int) (*profile.Profile, error) {
	ca, err := devca.New(TrustDomain, 30*24*time.Hour)
	if err != nil {
		return nil, err
	}
	pki := filepath.Join(dir, "pki")
	if _, err := ca.WriteBundle(pki); err != nil {
		return nil, err
	}
	p := &profile.Profile{
		ServerID: "spiffe://" + TrustDomain + Identities["arbiter"], TrustDomain: TrustDomain,
		Bundle: "pki/bundle.pem", Identities: map[string]profile.Identity{}, DefaultIdentity: "demo",
	}
	ids := maps.Clone(Identities)
	for i := 0; i < workers; i++ {
		ids[fmt.Sprintf("worker-%d", i)] = fmt.Sprintf("/ns/bench/sa/worker-%d", i)
	}
	for name, path := range ids {
		if _, err := ca.WriteSVID(filepath.Join(pki, name), path, 7*24*time.Hour); err != nil {
			return nil, err
		}
		p.Identities[name] = profile.Identity{SPIFFEID: "spiffe://" + TrustDomain + path,
			Cert: filepath.Join("pki", name, "svid.pem"), Key: filepath.Join("pki", name, "key.pem")}
	}
	// Paths in the profile are relative to dir; Source resolves them.
	p, err = reload(p, dir)
	return p, err
}

func reload(p *profile.Profile, dir string) (*profile.Profile, error) {
	path := filepath.Join(dir, "profile.json")
	p.Endpoint = "pending"
	if err := p.Save(path); err != nil {
		return nil, err
	}
	return profile.Load(path)
}

// StartArbiter starts (or restarts, on the same address) the arbiter.
func (e *Env) StartArbiter() error {
	if e.server != nil {
		return errors.New("devenv: arbiter already running")
	}
	src, err := e.Profile.Source("arbiter")
	if err != nil {
		return err
	}
	self, _ := identity.ID(src)
	td := spiffeid.RequireTrustDomainFromString(TrustDomain)
	e.Registry = prometheus.NewRegistry()
	var etcd arbiter.Etcd = e.lockPath.coord
	if e.opts.WrapEtcd != nil {
		etcd = e.opts.WrapEtcd(etcd)
	}
	var adminEtcd arbiter.Etcd = e.adminPath.coord
	if e.opts.WrapAdminEtcd != nil {
		adminEtcd = e.opts.WrapAdminEtcd(adminEtcd)
	}
	cfg := arbiter.Config{
		Etcd: etcd, AdminEtcd: adminEtcd, Cluster: e.coordName(), Self: self, Classes: e.opts.Classes, Authorizer: e.opts.Authorizer,
		IsOperator: arbiter.OperatorPathPrefix(td, "/operator/"), OpTimeout: e.opts.OpTimeout, GroupCommit: e.opts.GroupCommit,
		PollInterval: e.opts.PollInterval, ValidateRate: e.opts.ValidateRate, ValidateBurst: e.opts.ValidateBurst, Metrics: e.Registry, Logger: e.opts.Logger,
		Quotas: e.opts.Quotas, Operators: e.opts.Operators, ActionTTL: e.opts.ActionTTL, AllowAnyWorkload: e.opts.AllowAnyWorkload,
		// The embedded default without operator sign-in keeps the direct
		// advance: tests and a trial restore must be able to unseal.
		OnePersonEpochAdvance: e.opts.Operators == nil,
	}
	if e.opts.Audit != nil {
		cfg.Audit = e.opts.Audit
	}
	if e.opts.AuditReader != nil {
		cfg.Audit = e.opts.AuditReader
	}
	var srv arbiter.Service
	if len(e.opts.Shards) > 0 || e.opts.Homes != nil {
		shards, admin := map[string]arbiter.Etcd{}, map[string]arbiter.Etcd{}
		for name := range e.ShardEtcd {
			shards[name], admin[name] = e.lockPath.shards[name], e.adminPath.shards[name]
		}
		ro, err := arbiter.NewRouter(arbiter.RouterConfig{Config: cfg, Shards: shards, AdminShards: admin,
			Region: e.opts.Region, Homes: e.opts.Homes})
		if err != nil {
			return err
		}
		e.Router, srv = ro, ro
	} else {
		a, err := arbiter.New(cfg)
		if err != nil {
			return err
		}
		e.Arbiter, srv = a, a
	}
	listen := e.opts.Listen
	if e.Addr != "" {
		listen = e.Addr
	}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("devenv: arbiter listen %s: %w", listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.lis, e.Addr = cancel, lis, lis.Addr().String()
	go srv.Run(ctx)
	// A sealed cluster (restored, or its record lost) is its state, not a
	// start failure: the arbiter serves, refusing grants, until the advance.
	if err := srv.Ready(ctx); err != nil && reason.Of(err) != lockv1.ErrorReason_SEALED {
		cancel()
		lis.Close()
		return fmt.Errorf("devenv: arbiter not ready: %w", err)
	}
	if e.server, err = arbiter.NewGRPCServer(srv, src); err != nil {
		cancel()
		lis.Close()
		return err
	}
	e.served = srv
	go e.server.Serve(lis)
	if e.metrics == nil {
		ml := e.opts.MetricsListen
		if ml == "" {
			ml = "127.0.0.1:0"
		}
		mlis, err := net.Listen("tcp", ml)
		if err != nil {
			return fmt.Errorf("devenv: metrics listen %s: %w", ml, err)
		}
		e.MetricsAddr = mlis.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{e}, promhttp.HandlerOpts{}))
		e.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go e.metrics.Serve(mlis)
	}
	return nil
}

// Gather serves the current arbiter's metrics across arbiter restarts.
func (e *Env) Gather() ([]*dto.MetricFamily, error) {
	return prometheus.Gatherers{e.Registry, e.AuditRegistry}.Gather()
}

// StopArbiter stops the arbiter hard, as a crash would: open streams break
// and no session is closed. Its waits end as in a drain: a crashed arbiter
// cannot take its durable waiters' keys out either.
func (e *Env) StopArbiter() {
	if e.server == nil {
		return
	}
	e.served.Drain()
	e.server.Stop()
	e.cancel()
	e.server = nil
}

// Client dials the arbiter as the named development identity.
func (e *Env) Client(name string) (*lockclient.Client, error) {
	return lockclient.DialProfile(e.Profile, name)
}

// Close stops everything.
func (e *Env) Close() {
	if e.stopAudit != nil {
		e.stopAudit()
	}
	e.StopArbiter()
	if e.metrics != nil {
		e.metrics.Close()
	}
	for _, p := range []signedIn{e.lockPath, e.adminPath, e.tailerPath} {
		p.close()
	}
	if e.Etcd != nil {
		e.Etcd.Close()
	}
	if e.Cluster != nil {
		e.Cluster.Close()
	}
	for name, cl := range e.ShardEtcd {
		cl.Close()
		e.ShardClusters[name].Close()
	}
}

// server is what StartArbiter serves: an Arbiter or a Router.

// startAudit runs the tailers of Options.Audit until Close.
func (e *Env) startAudit() {
	e.AuditRegistry = prometheus.NewRegistry()
	if e.opts.Audit == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tailers.Run(ctx, tailers.Config{CoordName: e.coordName(), Coord: e.tailerPath.coord, Shards: e.tailerPath.shards, Store: e.opts.Audit,
			Metrics: audit.NewMetrics(e.AuditRegistry), Logger: e.opts.Logger, Archive: e.opts.Archive})
	}()
	e.stopAudit = func() { cancel(); wg.Wait() }
}

// startShards starts the entity shards' clusters and a client of each.
func (e *Env) startShards(ctx context.Context) error {
	if len(e.opts.Shards) == 0 {
		return nil
	}
	e.ShardClusters, e.ShardEtcd = map[string]*etcdembed.Cluster{}, map[string]*clientv3.Client{}
	members := e.opts.ShardMembers
	if members == 0 {
		members = 1
	}
	for _, name := range e.opts.Shards {
		c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(e.opts.Dir, "shards", name), Members: members,
			Logger: e.opts.EtcdLogger, Auth: &e.EtcdAuth})
		if err != nil {
			return fmt.Errorf("devenv: shard %s: %w", name, err)
		}
		e.ShardClusters[name] = c
		cl, err := clientv3.New(c.ClientConfig(etcdauth.RootUser))
		if err != nil {
			return err
		}
		e.ShardEtcd[name] = cl
	}
	return nil
}

// signedIn are the coord cluster and each shard as one etcd user.
type signedIn struct {
	coord  *clientv3.Client
	shards map[string]*clientv3.Client
}

// signIn opens a client of every cluster as user.
func (e *Env) signIn(user string) (signedIn, error) {
	out := signedIn{shards: map[string]*clientv3.Client{}}
	var err error
	if out.coord, err = etcdauth.New(e.Cluster.ClientConfig(user)); err != nil {
		return out, err
	}
	for name, c := range e.ShardClusters {
		if out.shards[name], err = etcdauth.New(c.ClientConfig(user)); err != nil {
			out.close()
			return signedIn{}, err
		}
	}
	return out, nil
}

func (s signedIn) close() {
	if s.coord != nil {
		s.coord.Close()
	}
	for _, c := range s.shards {
		c.Close()
	}
}

// initialShards are map version 1's shards.
func (e *Env) initialShards() []string {
	if e.opts.InitialShards != nil {
		return e.opts.InitialShards
	}
	return e.opts.Shards
}

// bootstrap gives the new coord cluster and map version 1's shards their
// first epochs; shards added later are bootstrapped by the add.
func (e *Env) bootstrap(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	shards := map[string]clientv3.KV{}
	for _, name := range e.initialShards() {
		shards[name] = e.ShardEtcd[name]
	}
	if _, err := epoch.BootstrapRegion(ctx, e.Etcd, e.coordName(), shards, 0); err != nil {
		return fmt.Errorf("devenv: %w", err)
	}
	return nil
}

// coordName is the coord cluster's name in metrics and epoch records.
func (e *Env) coordName() string {
	if len(e.opts.Shards) > 0 || e.opts.Homes != nil {
		return "coord"
	}
	return "embedded"
}

// Shardmap is the environment's clusters, for shardmap.Add.
func (e *Env) Shardmap() shardmap.Clusters {
	c := shardmap.Clusters{Coord: e.Etcd, Shards: map[string]shardmap.Etcd{}}
	for name, cl := range e.ShardEtcd {
		c.Shards[name] = cl
	}
	return c
}
