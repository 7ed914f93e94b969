// Package arbiter is the lock service: the only writer of grants to etcd
// (ADR-18). It serves lockplane.lock.v1, and wires in the packages that
// serve the rest (admin: lockplane.admin.v1; health) or that it asks
// (quota); see docs/architecture.md for which package owns what.
//
// Guarantees, each enforced by an etcd transaction rather than by arbiter
// memory, so any number of arbiters may serve one cluster and any of them
// may crash at any time:
//   - A grant is one Txn that commits only if the key is free, the epoch
//     record is unchanged and the session is the caller's and alive; its
//     token is the epoch and that Txn's revision (ADR-02).
//   - A release deletes a hold only if it is still the grant it names.
//   - No grant is returned from a cluster whose ID differs from the epoch
//     record's (ADR-03), or without a quorum (ADR-04).
//   - A watch event only ever triggers another grant Txn (ADR-15).
package arbiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/internal/arbiter/health"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
)

// Config configures an Arbiter.
type Config struct {
	// Etcd is the cluster holding the lock log, signed in as the lock
	// path's etcd user (etcdauth.Arbiter) when the cluster has
	// authentication on.
	Etcd Etcd
	// AdminEtcd is the same cluster signed in as the Admin API's user
	// (etcdauth.Admin): force-release, epoch advance and shard add write
	// through it, so etcd refuses the lock path those writes. Etcd when
	// nil (a cluster without authentication).
	AdminEtcd Etcd
	// Cluster names the cluster in metrics ("coord", "entity-1", ...).
	Cluster string
	// Self is the arbiter's own SPIFFE ID, reported by Status.
	Self spiffeid.ID
	// Classes resolves lock classes; class.NewStatic() when nil.
	Classes class.Registry
	// Authorizer decides who may lock what: a policy set's grants
	// (live.Policy). Exactly one of it and AllowAnyWorkload is required
	// (CheckAuthorization): an arbiter must not fail open on
	// authorisation by omission.
	Authorizer Authorizer
	// AllowAnyWorkload, with no Authorizer, lets every workload of the
	// trust domain lock every key: for trials and tests. It alone makes
	// authorisation open, which is logged at start and exported as
	// lockplane_authorization_open.
	AllowAnyWorkload bool
	// EtcdWithoutAuth says the clients sign in to etcd as no user
	// (the arbiter's --etcd-without-auth), so etcd does not keep the lock
	// path, the Admin API and the tailers apart. Logged at start and
	// exported as lockplane_etcd_auth_off, beside open authorisation.
	EtcdWithoutAuth bool
	// IsOperator decides who may call the admin RPCs that change state,
	// and read audit history.
	IsOperator func(spiffeid.ID) bool
	// Audit answers the admin API's audit queries; none when nil.
	Audit audit.Reader
	// Operators verifies operators' OpenID Connect ID tokens: the
	// two-person actions (force-release, epoch advance) need it, and are
	// refused, saying so, when it is nil.
	Operators admin.OperatorVerifier
	// OnePersonEpochAdvance lets a single SPIFFE operator advance an
	// epoch (AdvanceEpoch) while Operators is nil. Off, the direct advance
	// is refused until operator sign-in is configured: one person alone
	// must not be able to let two writers in (ADR-03). For trials and the
	// embedded default.
	OnePersonEpochAdvance bool
	// ActionTTL is how long a two-person action's request lives, pending
	// or decided: past it, it cannot be approved. 1 h when zero.
	ActionTTL time.Duration
	// OpTimeout bounds every etcd call: past it the arbiter answers
	// NO_QUORUM rather than hang. 2 s when zero.
	OpTimeout time.Duration
	// MaxWait caps a waiting Acquire. 5 min when zero.
	MaxWait time.Duration
	// GroupCommit is how many grant and release Txns one cluster has in
	// flight at once; requests that arrive meanwhile go together in the
	// next, one sub-Txn each (groupcommit.go). DefaultGroupCommit when
	// zero; negative sends every request as its own Txn.
	GroupCommit int
	// PollInterval is the fallback retry period of a waiter whose watch
	// missed a release; jittered. 1 s when zero.
	PollInterval time.Duration
	// ValidateRate and ValidateBurst limit ValidateToken per namespace, apart
	// from grants: 200/s with bursts of 50 when zero.
	ValidateRate  float64
	ValidateBurst int
	// CallRate and CallBurst limit each identity's Acquire, OpenSession
	// and Inspect calls at this arbiter (callrate.go says why not the
	// others): the fan-in tier's per-identity local rate limit, which
	// proxyless clients have no proxy to apply. No limit when CallRate is
	// zero; CallBurst is CallRate rounded up when zero.
	CallRate  float64
	CallBurst int
	// TrustedProxy is the SPIFFE ID of the fan-in proxy (an Envoy that
	// terminates the workloads' mTLS): its calls are the forwarded client
	// certificate's, by x-forwarded-client-cert (package caller). None
	// when zero. Serve with StreamInterceptor too.
	TrustedProxy spiffeid.ID
	// Quotas limits each identity's live sessions and holds; none when nil.
	Quotas quota.Quotas
	// Metrics receives the arbiter's metrics; not registered when nil.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

// Arbiter serves the lock and admin APIs for one etcd cluster. Served
// alone it admits each call itself (admit); behind a Router it serves the
// calls the Router admitted (acquireAdmitted, ...), trusting that admission.
type Arbiter struct {
	lockv1.UnimplementedLockServiceServer
	// etcdCalls bounds its etcd calls by cfg.OpTimeout and maps failures.
	etcdCalls
	cfg  Config
	etcd Etcd
	// commits sends the grant and release Txns, batched (GroupCommit).
	commits *groupCommit
	// renewer renews sessions' leases on a few long-lived streams.
	renewer *leaseRenewer
	// renewals runs KeepAlive streams' renewals (serveKeepAlive).
	renewals *workers
	// admin is the cluster as the Admin API's etcd user.
	admin   Etcd
	log     *slog.Logger
	epochs  epochCache
	metrics *metrics
	health  *health.State
	// gate admits the calls this Arbiter serves as the gRPC server.
	gate admitter
	// validations limits ValidateToken per namespace.
	validations *quota.Rates
	// waiters queues waiting Acquires per key.
	waiters queues
	// drained ends when Drain is called; every wait ends with it.
	drained context.Context
	drain   context.CancelFunc
	// quota enforces Quotas, counting this cluster's live sessions and
	// holds into the usage a Router's arbiters share. shardOf marks an entity shard's arbiter,
	// whose session records are shard leases of coord sessions.
	quota   quotaGate
	shardOf bool
	// forced are the holds force-released on this cluster in the last
	// day, which keepalives of their sessions report.
	forced *forcedHolds
	// owners are the identities that opened the sessions this arbiter has
	// seen: every call naming a session is checked against its caller.
	owners *sessionOwners
	// sessionReads coalesces renewals' reads of their session records
	// (sessionLives) into one read-only Txn per batch.
	sessionReads *groupCommit
	// hooks are the tests' synchronisation points; nil in production.
	hooks atomic.Pointer[testHooks]
	// placement is where the registry puts keys (placementOf); grants
	// need the epoch record to carry the same.
	placement string
}

// quotaGate is what the lock core needs of quota enforcement
// (quota.Gate): following its cluster's usage, and the check before a
// new session or hold.
type quotaGate interface {
	Run(ctx context.Context)
	Ready(ctx context.Context) error
	Check(ctx context.Context, caller spiffeid.ID, what quota.What) error
}

// withinQuota refuses a new session or hold past the caller's limit
// (quota.Gate.Check).
func (a *Arbiter) withinQuota(ctx context.Context, caller spiffeid.ID, what quota.What) error {
	return a.quota.Check(ctx, caller, what)
}

// collaborators are what an Arbiter is given at construction rather than
// makes: the metrics it reports to and the quota usage it counts into,
// which a Router's arbiters share (one set of metrics, told apart by the
// cluster label; one usage, as limits span the region's clusters), and
// whether it serves an entity shard behind a Router.
type collaborators struct {
	metrics *metrics
	usage   *quota.Usage
	shardOf bool
}

// New checks cfg and returns an Arbiter. Call Run to keep its epoch current.
func New(cfg Config) (*Arbiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := starting(cfg)
	if err != nil {
		return nil, err
	}
	return newArbiter(cfg, collaborators{metrics: m, usage: quota.NewUsage()}), nil
}

// starting is what is done once per server, an Arbiter alone or a Router
// for all its clusters: its metrics are made and, if authorisation is
// open, that is logged and exported, so an open arbiter is never silent.
func starting(cfg Config) (*metrics, error) {
	m, err := newMetrics(cfg.Metrics, warnings{authorizationOpen: cfg.AllowAnyWorkload, etcdAuthOff: cfg.EtcdWithoutAuth})
	if err != nil {
		return nil, err
	}
	if cfg.AllowAnyWorkload {
		cfg.Logger.Warn("authorisation is open: every workload of the trust domain may lock every key " +
			"(AllowAnyWorkload, the arbiter's --allow-any-workload); give a policy set (--policies) in production")
	}
	if cfg.EtcdWithoutAuth {
		cfg.Logger.Warn("etcd authentication is not used (--etcd-without-auth): the lock path could write force-release records; give --etcd-credentials in production")
	}
	return m, nil
}

// ErrNoAuthorizer and ErrAuthorizerAndOpen are the two ways to break the
// authorisation rule (CheckAuthorization). Callers that name the two
// settings otherwise (the arbiter's flags, devenv's Options) map them.
var (
	ErrNoAuthorizer = errors.New("arbiter: Config.Authorizer or Config.AllowAnyWorkload is required: without an Authorizer " +
		"every workload of the trust domain could lock every key; give a policy set's grants, or set AllowAnyWorkload for a trial")
	ErrAuthorizerAndOpen = errors.New("arbiter: Config.Authorizer and Config.AllowAnyWorkload: choose one; the Authorizer decides who may lock what")
)

// CheckAuthorization is the one rule for who decides authorisation: an
// Authorizer or AllowAnyWorkload, exactly one. It returns ErrNoAuthorizer
// or ErrAuthorizerAndOpen when broken.
func CheckAuthorization(haveAuthorizer, allowAnyWorkload bool) error {
	switch {
	case !haveAuthorizer && !allowAnyWorkload:
		return ErrNoAuthorizer
	case haveAuthorizer && allowAnyWorkload:
		return ErrAuthorizerAndOpen
	}
	return nil
}

// authorizer is who decides authorisation under cfg. The open authorizer
// is never stored in cfg, so checking cfg again gives the same answer.
func (cfg Config) authorizer() Authorizer {
	if cfg.AllowAnyWorkload {
		return allowTrustDomain{}
	}
	return cfg.Authorizer
}

// withDefaults checks cfg and fills in the defaults Config documents.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Etcd == nil {
		return cfg, errors.New("arbiter: Config.Etcd is required")
	}
	if cfg.AdminEtcd == nil {
		cfg.AdminEtcd = cfg.Etcd
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "default"
	}
	if cfg.Classes == nil {
		cfg.Classes = class.NewStatic()
	}
	// A policy set is checked as it loads; a fixed set given in code is
	// checked here: one key must have one tier.
	if s, ok := cfg.Classes.(class.Static); ok {
		if err := class.Check(s); err != nil {
			return cfg, fmt.Errorf("arbiter: Config.Classes: %w", err)
		}
	}
	if isOpen(cfg.Authorizer) {
		return cfg, errors.New("arbiter: Config.Authorizer: the open authorizer may not be given as one; " +
			"set Config.AllowAnyWorkload, which is logged and exported as open authorisation")
	}
	if err := CheckAuthorization(cfg.Authorizer != nil, cfg.AllowAnyWorkload); err != nil {
		return cfg, err
	}
	if cfg.IsOperator == nil {
		cfg.IsOperator = func(spiffeid.ID) bool { return false }
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 2 * time.Second
	}
	if cfg.ActionTTL == 0 {
		cfg.ActionTTL = time.Hour
	}
	// A request lives on an etcd lease: whole seconds, and a week at most
	// (a request nobody approved in a week is not a decision).
	if cfg.ActionTTL < time.Second || cfg.ActionTTL > 7*24*time.Hour {
		return cfg, fmt.Errorf("arbiter: Config.ActionTTL %v: must be between 1s and 168h", cfg.ActionTTL)
	}
	if cfg.GroupCommit == 0 {
		cfg.GroupCommit = DefaultGroupCommit
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 5 * time.Minute
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ValidateRate == 0 {
		cfg.ValidateRate, cfg.ValidateBurst = 200, 50
	}
	switch {
	case cfg.CallRate < 0 || math.IsNaN(cfg.CallRate) || math.IsInf(cfg.CallRate, 0):
		return cfg, fmt.Errorf("arbiter: Config.CallRate %v: must be a finite number of calls a second, 0 for no limit", cfg.CallRate)
	case cfg.CallBurst < 0:
		return cfg, fmt.Errorf("arbiter: Config.CallBurst %d: must be at least 0", cfg.CallBurst)
	case cfg.CallRate > 0 && cfg.CallBurst == 0:
		cfg.CallBurst = int(math.Ceil(cfg.CallRate))
	}
	return cfg, nil
}

// newArbiter is an Arbiter of cfg, which withDefaults has checked, with
// the collaborators it is given. It counts its cluster's live sessions and
// holds into the metrics.
func newArbiter(cfg Config, with collaborators) *Arbiter {
	a := &Arbiter{cfg: cfg, etcd: cfg.Etcd, admin: cfg.AdminEtcd, log: cfg.Logger, health: health.New(),
		commits:   newGroupCommit(cfg.Etcd, cfg.GroupCommit),
		renewals:  newWorkers(workerIdle),
		renewer:   newLeaseRenewer(func() pb.LeaseClient { return pb.NewLeaseClient(cfg.Etcd.ActiveConnection()) }, cfg.OpTimeout),
		etcdCalls: newEtcdCalls(cfg),
		gate:      newAdmitter(cfg, with.metrics),
		metrics:   with.metrics, shardOf: with.shardOf,
		validations: quota.NewRates(cfg.ValidateRate, cfg.ValidateBurst), forced: newForcedHolds(),
		owners: newSessionOwners(), sessionReads: newGroupRead(cfg.Etcd), placement: placementOf(cfg.Classes)}
	a.quota = quota.New(quota.Config{Quotas: cfg.Quotas, Usage: with.usage, Cluster: cfg.Cluster, Etcd: cfg.Etcd, Shard: with.shardOf,
		Bound: a.etcdCalls.bound, PollInterval: cfg.PollInterval})
	a.drained, a.drain = context.WithCancel(context.Background())
	with.metrics.live.add(a)
	return a
}

// Register adds the lock, admin, health and reflection services to s.
func (a *Arbiter) Register(s *grpc.Server) {
	lockv1.RegisterLockServiceServer(s, a)
	a.registerOthers(s, newAdmin(a, nil, nil))
}

// registerOthers adds every service but the lock service: admin, this
// cluster's health, and reflection.
func (a *Arbiter) registerOthers(s *grpc.Server, admin adminv1.AdminServiceServer) {
	adminv1.RegisterAdminServiceServer(s, admin)
	a.health.Register(s)
	reflection.Register(s)
}

// Drain ends every wait at once with DRAINING, so that callers retry on
// another arbiter instead of holding a rolling restart up for as long as
// their waits: memory waiters lose their place (ADR-14), durable waiters
// keep it. Grants and releases in flight complete. Call it before the gRPC
// server's GracefulStop.
func (a *Arbiter) Drain() { a.drain() }

// Run keeps the epoch record, the quota usage and the force-released
// holds current until ctx ends.
func (a *Arbiter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { a.watchEpoch(ctx) })
	wg.Go(func() { a.watchForced(ctx) })
	wg.Go(func() { a.quota.Run(ctx) })
	wg.Wait()
}

// Ready loads the epoch record, creating it on an empty cluster, and
// reports whether the cluster may serve grants (an error if it is sealed or
// unreachable). Serving does not depend on it: calls load it lazily.
// With quotas, it also waits for the usage counts to be followed.
func (a *Arbiter) Ready(ctx context.Context) error {
	if _, err := a.readyPlaced(ctx); err != nil {
		return err
	}
	return a.quota.Ready(ctx)
}
