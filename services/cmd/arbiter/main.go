// Command arbiter serves lockplane.lock.v1 and lockplane.admin.v1 for one
// etcd cluster: the production form of what `lockplane dev` embeds.
// `arbiter probe` checks, on its host, that one serves (probe.go).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/internal/credfile"
	"github.com/lockplane/lockplane/services/internal/svidflags"
	"github.com/lockplane/lockplane/services/internal/tailers"
	"github.com/lockplane/lockplane/services/internal/tlsfiles"
	"github.com/lockplane/lockplane/services/policy/live"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type flags struct {
	listen, metricsListen     string
	endpoints                 string
	etcdCert, etcdKey, etcdCA string
	etcdCredentials           string
	etcdWithoutAuth           bool
	onePersonEpochAdvance     bool
	svid                      svidflags.Flags
	cluster, operatorPrefix   string
	opTimeout                 time.Duration
	groupCommit               int
	callRate                  float64
	pollInterval              time.Duration
	trustedProxy              string
	callBurst                 int
	actionTTL                 time.Duration
	classes                   []class.Class
	policies                  string
	allowAnyWorkload          bool
	policyReload              time.Duration
	region                    string
	shards                    map[string]string
	auditStore, auditDatabase string
	auditCredentials          string
	archive                   archiveFlags
	oidc                      oidcFlags
}

func main() {
	// `arbiter probe` is the arbiter's readiness check on its host
	// (probe.go); every other command line is the server's.
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(probeMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	var f flags
	flag.StringVar(&f.listen, "listen", "0.0.0.0:7443", "gRPC address (mTLS)")
	flag.StringVar(&f.metricsListen, "metrics-listen", "0.0.0.0:9464", "Prometheus /metrics address")
	flag.StringVar(&f.endpoints, "etcd-endpoints", "", "comma-separated etcd client URLs (required)")
	flag.StringVar(&f.etcdCert, "etcd-cert", "", "client certificate for etcd (PEM)")
	flag.StringVar(&f.etcdKey, "etcd-key", "", "client key for etcd (PEM)")
	flag.StringVar(&f.etcdCA, "etcd-ca", "", "CA bundle that signed etcd's serving certificates (PEM)")
	flag.StringVar(&f.etcdCredentials, "etcd-credentials", "", "the etcd users of every cluster (coord and each --shard): "+credfile.Rule(etcdRoles...)+
		"; the lock path, the Admin API and the audit tailers sign in as their own user, so etcd refuses each outside its key space; this or --etcd-without-auth is required")
	flag.BoolVar(&f.etcdWithoutAuth, "etcd-without-auth", false, "use the clusters without etcd users (authentication off): for trials and tests only; logged at start and exported as lockplane_etcd_auth_off")
	flag.BoolVar(&f.onePersonEpochAdvance, "allow-one-person-epoch-advance", false, "without --oidc-issuer, let one SPIFFE operator make the one-person calls that advance an epoch and delete holds: AdvanceEpoch (lockctl epoch advance --direct) and AddShard (lockctl shards add): for trials only; with sign-in configured both are always two-person")
	f.svid.Register(flag.CommandLine)
	flag.StringVar(&f.cluster, "cluster", "coord", "cluster name in metrics")
	f.operatorPrefix = admin.OperatorRoot + "/"
	flag.Func("operator-prefix", "SPIFFE ID path of operators' SVIDs, by whole segments (/operator covers /operator/alice, not /operatorX); "+
		admin.OperatorRoot+" or a path under it, which the policy set reserves; an SVID's last segment is the account its operator signs in as (default "+admin.OperatorRoot+"/)",
		func(v string) error {
			if _, err := parseOperatorPrefix(v); err != nil {
				return err
			}
			f.operatorPrefix = v
			return nil
		})
	flag.DurationVar(&f.opTimeout, "op-timeout", 2*time.Second, "bound on a call's etcd requests (shared by all of one call) before answering NO_QUORUM")
	flag.Float64Var(&f.callRate, "call-rate", 0, "lock.v1 calls a second each identity may make at this arbiter, past which it is refused RESOURCE_EXHAUSTED (RATE_LIMITED): the fan-in tier's per-identity limit, which proxyless clients have no proxy to apply (0: no limit)")
	flag.StringVar(&f.trustedProxy, "trusted-proxy-id", "", "the SPIFFE ID of the fan-in proxy (an Envoy that terminates the workloads' mTLS): its calls are made by the client certificate it forwards in x-forwarded-client-cert, and refused without one (docs/fan-in.md); the header is ignored from any other peer")
	flag.DurationVar(&f.pollInterval, "poll-interval", time.Second, "how often a waiter whose watch may have missed a release tries the key anyway (jittered); the watch is what normally wakes it")
	flag.IntVar(&f.callBurst, "call-burst", 0, "bursts of --call-rate (0: --call-rate rounded up)")
	flag.IntVar(&f.groupCommit, "group-commit", arbiter.DefaultGroupCommit, "grant and release Txns in flight per cluster; requests that arrive meanwhile are sent together in the next (0: each its own Txn)")
	flag.StringVar(&f.policies, "policies", "", "directory of LockClass and LockGrant documents: classes and prefix grants (replaces --class); this or --allow-any-workload is required")
	flag.BoolVar(&f.allowAnyWorkload, "allow-any-workload", false, "without a policy set, let every workload of the trust domain lock every key: for trials and tests only; logged at start and exported as lockplane_authorization_open")
	flag.DurationVar(&f.actionTTL, "action-ttl", time.Hour, "how long a two-person request (force-release, epoch advance) lives: past it, it cannot be approved (etcd keeps it on a lease of this TTL)")
	flag.DurationVar(&f.policyReload, "policy-reload", 30*time.Second, "how often --policies is read again (and on SIGHUP); an invalid set keeps the last good one")
	flag.Func("class", "a lock class NAME=TTL[:TIER[:PREFIX,...]] (e.g. fast=3s, orders=10s:entity:team-a/orders/), besides the default; a class on the entity tier names the key prefixes it serves (a key lives on one tier); repeatable; for tests and trials, where no --policies set is given", func(v string) error {
		name, spec, ok := strings.Cut(v, "=")
		ttl, rest, _ := strings.Cut(spec, ":")
		tier, prefixes, _ := strings.Cut(rest, ":")
		if tier == "" {
			tier = string(class.TierCoord)
		}
		d, err := time.ParseDuration(ttl)
		if !ok || name == "" || err != nil || d < 2*time.Second {
			return fmt.Errorf("want NAME=TTL[:TIER[:PREFIX,...]] with a TTL of at least 2s, got %q", v)
		}
		if tier != string(class.TierCoord) && tier != string(class.TierEntity) {
			return fmt.Errorf("%q: tier %q is not coord or entity", v, tier)
		}
		c := class.Class{Name: name, TTL: d, Tier: class.Tier(tier)}
		if prefixes != "" {
			c.Prefixes = strings.Split(prefixes, ",")
		}
		f.classes = append(f.classes, c)
		return class.Check(class.NewStatic(f.classes...))
	})
	flag.StringVar(&f.region, "region", "", "this arbiter's region: keys of namespaces a LockNamespace homes elsewhere are refused with WRONG_REGION naming their region")
	f.shards = map[string]string{}
	flag.Func("shard", "an entity shard NAME=ENDPOINTS (comma-separated etcd client URLs, same TLS as --etcd-*); repeatable. Without shards the entity tier is the coord cluster", func(v string) error {
		name, eps, ok := strings.Cut(v, "=")
		if !ok || name == "" || eps == "" {
			return fmt.Errorf("want NAME=ENDPOINTS, got %q", v)
		}
		if _, dup := f.shards[name]; dup {
			return fmt.Errorf("shard %s given twice", name)
		}
		f.shards[name] = eps
		return nil
	})
	flag.StringVar(&f.auditStore, "audit-store", "", "ClickHouse HTTP base URL of the audit store (e.g. http://clickhouse:8123): tail every cluster of this arbiter into it and answer the admin API's audit queries from it; an unreachable store is logged and retried, never fatal")
	flag.StringVar(&f.auditDatabase, "audit-database", "lockplane", "the audit store's ClickHouse database (created by the migrations)")
	flag.StringVar(&f.auditCredentials, "audit-credentials", "", "the audit store's users: "+credfile.Rule(auditRoles...)+
		"; the tailers write as the writer, audit queries read as the reader. Without it the store is used with no credentials (a store without passwords: trials only)")
	f.archive.register(flag.CommandLine)
	f.oidc.register(flag.CommandLine)
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		if ctx.Err() != nil {
			log.Error("arbiter stopped", "err", err, "cause", context.Cause(ctx).Error())
			os.Exit(1)
		}
		log.Error("arbiter stopped", "err", err)
		os.Exit(1)
	}
}

// parseOperatorPrefix is --operator-prefix read (admin.ParseOperatorPrefix):
// checked when the flag is parsed, and again by run for flags built in code.
func parseOperatorPrefix(v string) (admin.OperatorPrefix, error) { return admin.ParseOperatorPrefix(v) }

// run serves until ctx ends.
func run(ctx context.Context, f flags, log *slog.Logger) error {
	if err := f.authorization(); err != nil {
		return err
	}
	if f.endpoints == "" {
		return errors.New("--etcd-endpoints: required")
	}
	if f.pollInterval < 0 {
		return fmt.Errorf("--poll-interval %v: must not be negative (0: the default, 1s)", f.pollInterval)
	}
	var proxy spiffeid.ID
	if f.trustedProxy != "" {
		id, err := spiffeid.FromString(f.trustedProxy)
		if err != nil {
			return fmt.Errorf("--trusted-proxy-id %q: not a SPIFFE ID: %w", f.trustedProxy, err)
		}
		proxy = id
	}
	store, reader, err := f.audit()
	if err != nil {
		return err
	}
	arch, err := f.archive.open(reader, log)
	if err != nil {
		return err
	}
	operators, err := f.oidc.verifier()
	if err != nil {
		return err
	}
	accounts, err := f.etcdAccounts()
	if err != nil {
		return err
	}
	if f.actionTTL < time.Minute || f.actionTTL > 7*24*time.Hour {
		return fmt.Errorf("--action-ttl %v: must be between 1m and 168h: long enough for a second operator to approve, short enough that a stale request cannot be", f.actionTTL)
	}
	prefix, err := parseOperatorPrefix(f.operatorPrefix)
	if err != nil {
		return fmt.Errorf("--operator-prefix: %w", err)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	if f.svid.Socket != "" {
		// Said before the wait: a readiness failure shows this line as the
		// arbiter's last, not an empty log.
		log.Info("waiting for this arbiter's SVID from the SPIRE agent", "socket", f.svid.Socket, "at_most", svidflags.FirstSVIDWait.String())
	}
	src, err := f.svid.Open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	self, err := identity.ID(src)
	if err != nil {
		return err
	}
	if !proxy.IsZero() {
		switch {
		case !proxy.MemberOf(self.TrustDomain()):
			err = fmt.Errorf("is not of this arbiter's trust domain, %s: it could never connect", self.TrustDomain())
		case proxy == self:
			err = errors.New("is this arbiter's own ID")
		case prefix.Covers(proxy.Path()):
			err = fmt.Errorf("is under the operator prefix %s", prefix)
		}
		if err != nil {
			return fmt.Errorf("--trusted-proxy-id %s: %w", proxy, err)
		}
	}
	if prefix.Covers(self.Path()) {
		return fmt.Errorf("--operator-prefix %s: covers this arbiter's own ID %s: an arbiter is not an operator", prefix, self)
	}

	etcdTLS, err := etcdTLS(f)
	if err != nil {
		return err
	}
	coord, err := openEtcd(f.endpoints, etcdTLS, accounts)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer coord.close()
	if accounts != nil {
		if err := requireAuth(ctx, f.cluster, coord, log); err != nil {
			return err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := arbiter.Config{
		Etcd: coord.lock, AdminEtcd: coord.admin, Cluster: f.cluster, Self: self, IsOperator: prefix.IsOperator(self.TrustDomain()),
		OpTimeout: f.opTimeout, GroupCommit: groupCommitFlag(f.groupCommit), CallRate: f.callRate, CallBurst: f.callBurst, PollInterval: f.pollInterval, TrustedProxy: proxy, Metrics: reg, Logger: log, Classes: class.NewStatic(f.classes...), ActionTTL: f.actionTTL,
		// Without --oidc-issuer, force-release and the two-person epoch
		// advance are refused, saying no verifier is configured.
		Operators: operators, OnePersonEpochAdvance: f.onePersonEpochAdvance,
		// The library logs these and exports them as
		// lockplane_authorization_open and lockplane_etcd_auth_off.
		AllowAnyWorkload: f.allowAnyWorkload, EtcdWithoutAuth: accounts == nil,
	}
	if f.policies != "" {
		if len(f.classes) > 0 {
			return errors.New("--class and --policies: choose one; classes come from the policy set")
		}
		live, err := live.New(f.policies, log, reg)
		if err != nil {
			return fmt.Errorf("--policies: %w", err)
		}
		cfg.Classes, cfg.Authorizer = live, live
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		reload := make(chan struct{})
		go func() {
			for range hup {
				reload <- struct{}{}
			}
		}()
		go live.Watch(ctx, f.policyReload, reload)
	}
	var homes arbiter.Homes
	if cfg.Classes != nil {
		if live, ok := cfg.Classes.(*live.Policy); ok {
			homes, cfg.Quotas = live, live
		}
	}
	shards, adminShards, tailerShards := map[string]arbiter.Etcd{}, map[string]arbiter.Etcd{}, map[string]*clientv3.Client{}
	for name, eps := range f.shards {
		sc, err := openEtcd(eps, etcdTLS, accounts)
		if err != nil {
			return fmt.Errorf("--shard %s: etcd client: %w", name, err)
		}
		defer sc.close()
		if accounts != nil {
			if err := requireAuth(ctx, name, sc, log); err != nil {
				return err
			}
		}
		shards[name], adminShards[name], tailerShards[name] = sc.lock, sc.admin, sc.tailer
	}
	auditDone := make(chan struct{})
	if store != nil {
		cfg.Audit = reader
		if f.auditCredentials == "" {
			log.Warn("the audit store is used without credentials (no --audit-credentials): only a store without passwords accepts that")
		}
		go func() {
			defer close(auditDone)
			tc := tailers.Config{CoordName: f.cluster, Coord: coord.tailer, Shards: tailerShards, Store: store,
				Migrate: store.Migrate, Metrics: audit.NewMetrics(reg), Logger: log}
			if arch != nil {
				tc.Archive = arch
			}
			tailers.Run(ctx, tc)
		}()
		log.Info("audit on: tailing every cluster into the audit store", "store", redacted(f.auditStore), "database", f.auditDatabase,
			"archive", redacted(f.archive.url))
	} else {
		close(auditDone)
	}
	// The tailers end (and leave their elections) before the clients close.
	defer func() {
		stop()
		select {
		case <-auditDone:
		case <-time.After(10 * time.Second):
		}
	}()
	var a arbiter.Service
	if len(shards) > 0 || f.region != "" {
		a, err = arbiter.NewRouter(arbiter.RouterConfig{Config: cfg, Shards: shards, AdminShards: adminShards, Region: f.region, Homes: homes})
	} else {
		a, err = arbiter.New(cfg)
	}
	if err != nil {
		return err
	}
	go a.Run(ctx)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := a.Ready(rctx); err != nil {
			log.Warn("not ready yet; requests will retry the clusters", "err", err)
		}
	}()
	srv, err := arbiter.NewGRPCServer(a, src)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Addr: f.metricsListen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.ListenAndServe()
	log.Info("arbiter serving", "listen", lis.Addr().String(), "metrics", f.metricsListen, "id", self.String(), "etcd", f.endpoints)
	go func() {
		<-ctx.Done()
		log.Info("draining", "cause", context.Cause(ctx).Error()) // which signal, by name
		a.Drain()
		hs.Close()
		srv.GracefulStop()
	}()
	return srv.Serve(lis)
}

// audit is the audit store of --audit-store as its writer (the tailers)
// and as its reader (the audit queries), nil without it. It checks the
// URL and reads --audit-credentials only: the store may be down now and
// answer later.
func (f flags) audit() (writer, reader *chstore.Store, _ error) {
	if f.auditStore == "" {
		if f.auditCredentials != "" {
			return nil, nil, errors.New("--audit-credentials: given without --audit-store")
		}
		return nil, nil, nil
	}
	u, err := url.Parse(f.auditStore)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("--audit-store: want ClickHouse's HTTP base URL, e.g. http://clickhouse:8123, got %q", redacted(f.auditStore))
	}
	if u.User != nil {
		return nil, nil, fmt.Errorf("--audit-store: %q carries a user: a command line is no place for credentials; give them in --audit-credentials FILE", redacted(f.auditStore))
	}
	if f.auditDatabase == "" {
		return nil, nil, errors.New("--audit-database: required with --audit-store")
	}
	return f.auditStores(strings.TrimSuffix(f.auditStore, "/"))
}

// redacted is a URL as logs may show it: without a password.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func etcdTLS(f flags) (*tls.Config, error) {
	return tlsfiles.Files{CA: f.etcdCA, CAFlag: "--etcd-ca", Cert: f.etcdCert, Key: f.etcdKey, CertFlag: "--etcd-cert", KeyFlag: "--etcd-key"}.Client()
}

// authorization refuses to start an arbiter that would let every workload
// lock every key by omission: the library's rule (a policy set is the
// Authorizer), checked before anything starts, its answer in flag names.
func (f flags) authorization() error {
	switch err := arbiter.CheckAuthorization(f.policies != "", f.allowAnyWorkload); {
	case errors.Is(err, arbiter.ErrAuthorizerAndOpen):
		return errors.New("--policies and --allow-any-workload: choose one; a policy set's grants decide who may lock what")
	case errors.Is(err, arbiter.ErrNoAuthorizer):
		return errors.New("--policies DIR or --allow-any-workload is required: without a policy set every workload of the trust domain " +
			"could lock every key; give the reviewed LockClass and LockGrant documents, or opt out explicitly for a trial")
	default:
		return err
	}
}

// groupCommitFlag maps --group-commit to Config.GroupCommit, where 0 is
// the default and negative is off.
func groupCommitFlag(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
