// Package topology is a region's stack configuration and its placement rules.
//
// The rules decide whether its hosts can carry the service: a 5-member coord
// etcd cluster split 2-2-1 across three halls, entity shards of three
// members one per hall, two Tang servers in two halls, arbiters spread
// across halls, and at most one audit store host (ClickHouse), with etcd
// and Tang on dedicated hosts (ADR-06, 07, 08). A
// stack that breaks a rule is refused before anything is created, with the
// hall or role that is missing named.
package topology

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/lockplane/lockplane/services/operator/oidcauth"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Roles a host can have.
const (
	RoleCoord   = "coord"
	RoleEntity  = "entity"
	RoleTang    = "tang"
	RoleArbiter = "arbiter"
	// RoleAudit is the audit store's host: ClickHouse, which the arbiters'
	// audit tailers write to and answer `lockctl audit` from.
	RoleAudit = "audit"
	// RoleArchive is the audit archive's host: MinIO, where one arbiter
	// copies the audit store's history every day.
	RoleArchive = "archive"
	// RoleSpire is the SPIRE server's host: it issues the region's SVIDs
	// to the agents on the arbiter and workload hosts (docs/identity.md).
	RoleSpire = "spire"
	// RoleWorkload is a host where workloads run: its SPIRE agent gives
	// them the identities their LockGrants register.
	RoleWorkload = "workload"
)

// roles are every role a host can have.
var roles = []string{RoleCoord, RoleEntity, RoleTang, RoleArbiter, RoleAudit, RoleArchive, RoleSpire, RoleWorkload, RoleMonitor}

// Runtimes for the services that are not etcd or Tang.
const (
	RuntimeHost       = "host"
	RuntimeKubernetes = "kubernetes"
)

// Stack is the configuration of one region.
type Stack struct {
	Region  string   `json:"region"`
	Runtime string   `json:"runtime"`
	Halls   []string `json:"halls"`
	Hosts   []Host   `json:"hosts"`
	SSH     SSH      `json:"ssh"`
	Coord   Coord    `json:"coord"`
	Entity  Entity   `json:"entity"`
	Tang    Tang     `json:"tang"`
	Gates   Gates    `json:"gates"`
	Etcd    Etcd     `json:"etcd"`
	Arbiter Arbiter  `json:"arbiter"`
	// Audit is the audit store on the host with role audit.
	Audit Audit `json:"audit"`
	// Archive is the audit archive on the host with role archive.
	Archive Archive `json:"archive"`
	// Spire is the SPIRE server on the host with role spire, and its
	// agents; without one, the stack's CA signs month-long SVID files.
	Spire Spire `json:"spire"`
	// Snapshots is the clusters' snapshot schedule into a store stack.
	Snapshots Snapshots `json:"snapshots"`
	// Monitoring is the monitoring host's (role monitor) Prometheus and
	// Alertmanager.
	Monitoring Monitoring `json:"monitoring"`
	// Restore, in a DR stack, stands the clusters up from the snapshot store.
	Restore Restore `json:"restore"`
	// RestoreInPlace restores entity shards of a running region from its
	// snapshot store, by shard: the snapshot's name, or "latest".
	RestoreInPlace map[string]string `json:"restoreInPlace,omitempty"`
	// Kubernetes is the arbiter's placement under the kubernetes runtime.
	Kubernetes Kubernetes `json:"kubernetes"`
	// BinDir holds the binaries the program installs (etcd, arbiter,
	// lockplane-node), on the machine running the program.
	BinDir string `json:"binDir"`
	// TrustDomain is the SPIFFE trust domain of the region's workloads.
	TrustDomain string `json:"trustDomain"`
	// Policies is the directory of the region's LockClass and LockGrant
	// documents (ADR-24), on the machine running the program.
	Policies string `json:"policies"`
	// Operators is the OpenID provider operators sign in with for the
	// two-person actions (docs/operators.md); none when Issuer is empty.
	Operators Operators `json:"operators"`
}

// Operators is the arbiters' --oidc-* flags: the provider whose ID tokens
// authorise force-release and epoch advance.
type Operators struct {
	// Issuer, e.g. https://keycloak.example/realms/lockplane.
	Issuer string `json:"issuer,omitempty"`
	// ClientID is the client operators sign in with (lockctl).
	ClientID string `json:"clientId,omitempty"`
	// CAFile is the CA bundle of the provider's TLS, on the machine running
	// the program; the system roots when empty.
	CAFile string `json:"caFile,omitempty"`
	// RoleClaim (roles; Keycloak: realm_access.roles) must list Role
	// (lock-operator).
	RoleClaim string `json:"roleClaim,omitempty"`
	Role      string `json:"role,omitempty"`
	// AMR values any of which prove a second factor (otp, mfa, hwk); ACR
	// a level that does too.
	AMR []string `json:"amr,omitempty"`
	ACR string   `json:"acr,omitempty"`
	// AccountClaim (preferred_username) is the ID token claim naming a
	// person's account: the arbiter acts on a two-person action only when
	// it is the last segment of the operator SVID the call came on.
	AccountClaim string `json:"accountClaim,omitempty"`
	// People are the operators' accounts at the provider (alice, bob): up
	// issues each a client SVID spiffe://td/operator/<name>, written to the
	// profile as identity <name>, for the two-person actions.
	People []string `json:"people,omitempty"`
}

// OperatorDeployer is the last segment of the shared operator SVID up
// issues (spiffe://td/operator/deployer) for the one-person admin calls;
// it names no person.
const OperatorDeployer = "deployer"

// reservedPeople are names a person cannot have: the shared SVID's, and
// the identities the profile up writes holds besides the people's.
var reservedPeople = []string{OperatorDeployer, "operator", "demo", "workload"}

// person is a DNS label: the SVID's last path segment and a profile
// identity name alike.
var person = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Host is one machine the operator owns.
type Host struct {
	Name    string   `json:"name"`
	Address string   `json:"address"`
	Hall    string   `json:"hall"`
	Roles   []string `json:"roles"`
	// Shard is the entity shard an entity host belongs to.
	Shard int `json:"shard,omitempty"`
	// DataDisk is the directory on the disk etcd writes to, where the
	// fsync benchmark runs.
	DataDisk string `json:"dataDisk,omitempty"`
	// LuksDevice is the block device encrypted for etcd's data; on hosts
	// without device-mapper, an image file made at LuksImageMiB.
	LuksDevice   string `json:"luksDevice,omitempty"`
	LuksImageMiB int    `json:"luksImageMiB,omitempty"`
	// HostKey pins the host's SSH key (authorized_keys form).
	HostKey string `json:"hostKey,omitempty"`
	// Root is where the host's filesystem starts: "/" on real hosts; a
	// directory on test hosts that share one machine's disk.
	Root string `json:"root,omitempty"`
}

// SSH is how the program reaches hosts.
type SSH struct {
	User           string `json:"user"`
	PrivateKeyFile string `json:"privateKeyFile"`
	// KnownHostsFile pins host keys not pinned on the host itself.
	KnownHostsFile string `json:"knownHostsFile,omitempty"`
	// TrustOnFirstUse accepts unpinned host keys. Never for production.
	TrustOnFirstUse bool `json:"trustOnFirstUse,omitempty"`
	// ServiceMode is systemd, or supervised on hosts without systemd.
	ServiceMode string `json:"serviceMode"`
}

// Coord is the coord tier.
type Coord struct {
	Members int `json:"members"`
	// EpochAbove is used once, when the coord cluster holds no epoch
	// records: its first epoch exceeds it. 0 for a new region; for a coord
	// cluster rebuilt empty, the highest epoch the region served (ADR-03).
	EpochAbove int `json:"epochAbove,omitempty"`
}

// Entity is the entity tier.
type Entity struct {
	Shards  int `json:"shards"`
	Members int `json:"members"`
}

// Tang is the Tang servers that unlock etcd disks.
type Tang struct {
	Servers int `json:"servers"`
	Port    int `json:"port"`
}

// Gates are the figures a stack must meet.
type Gates struct {
	FsyncP99Ms   float64 `json:"fsyncP99Ms"`
	AcquireP99Ms float64 `json:"acquireP99Ms"`
	// FsyncSizeMiB is the benchmark's size (etcd's recipe: 22).
	FsyncSizeMiB int `json:"fsyncSizeMiB,omitempty"`
}

// Etcd is the tuning every member gets.
type Etcd struct {
	HeartbeatMs      int    `json:"heartbeatMs"`
	ElectionMs       int    `json:"electionMs"`
	QuotaBytes       int64  `json:"quotaBytes"`
	CompactionPeriod string `json:"compactionPeriod"`
	LeaseCheckpoint  bool   `json:"leaseCheckpoint"`
	SnapshotCount    int    `json:"snapshotCount,omitempty"`
	ClientPort       int    `json:"clientPort,omitempty"`
	PeerPort         int    `json:"peerPort,omitempty"`
}

// MetricsPort is where each member serves /metrics, /livez and /readyz,
// beside its client port.
func (e Etcd) MetricsPort() int { return e.ClientPort + 2 }

// Arbiter is the lock service.
type Arbiter struct {
	Replicas int `json:"replicas"`
	Port     int `json:"port"`
	Metrics  int `json:"metricsPort"`
	// FanInPort is where the fan-in tier's xDS control plane
	// (lockplane-fanin) serves on each arbiter host (docs/fan-in.md).
	FanInPort int `json:"fanInPort,omitempty"`
}

// Audit is the audit history (docs/audit.md): a ClickHouse server on the
// stack's audit host, which every arbiter tails its clusters into and
// answers `lockctl audit` from.
type Audit struct {
	// Enabled defaults to whether a host has role audit; false leaves the
	// audit host unused and the arbiters without an audit store.
	Enabled *bool `json:"enabled,omitempty"`
	// Database is the ClickHouse database (--audit-database).
	Database string `json:"database,omitempty"`
	// HTTPPort is ClickHouse's HTTP interface on the audit host's address.
	HTTPPort int `json:"httpPort,omitempty"`
	// Networks are the addresses or CIDR prefixes, besides the host
	// runtime's arbiter hosts and the audit host's loopback, that may use
	// the store: required with the kubernetes runtime (the pods' network).
	Networks []string `json:"networks,omitempty"`
}

// Archive is the audit archive (docs/audit.md): a MinIO server on the
// stack's archive host, served over TLS, where the elected arbiter copies
// each day's history as Parquet and the epoch-advance and force-release
// records under object lock.
type Archive struct {
	// Enabled defaults to whether a host has role archive; it needs audit.
	Enabled *bool `json:"enabled,omitempty"`
	// Port is MinIO's S3 API on the archive host's address (9000).
	Port int `json:"port,omitempty"`
	// HistoryDays is how long a day's history is kept (365); RecordsYears
	// how long a record is retained (7).
	HistoryDays  int `json:"historyDays,omitempty"`
	RecordsYears int `json:"recordsYears,omitempty"`
	// RecordsMode is the records' retention: COMPLIANCE (the default:
	// nobody can delete one early) or GOVERNANCE.
	RecordsMode string `json:"recordsMode,omitempty"`
}

// Spire is the region's workload identity (ADR-19): a SPIRE server on the
// host with role spire, signing under the stack's trust domain CA, and an
// agent on every arbiter and workload host. The arbiters take their SVIDs
// from their agent's Workload API; the registration entries come from
// the LockGrants' workloads.
type Spire struct {
	// Port is the server's API on the spire host's address (8081).
	Port int `json:"port,omitempty"`
	// SVIDTTL is an X.509 SVID's lifetime (1h, the design's figure):
	// agents rotate an SVID at half of it.
	SVIDTTL string `json:"svidTTL,omitempty"`
	// PostgresFile names a file, on the machine running the program,
	// holding the datastore's PostgreSQL connection string; without one
	// the server keeps SQLite on its host.
	PostgresFile string `json:"postgresFile,omitempty"`
}

// SpireEnabled reports whether the stack runs SPIRE: whether a host has
// role spire.
func (s *Stack) SpireEnabled() bool {
	return slices.ContainsFunc(s.Hosts, func(h Host) bool { return h.Has(RoleSpire) })
}

// SVIDLifetime is spire.svidTTL as a duration (validated).
func (s Spire) SVIDLifetime() time.Duration {
	d, _ := time.ParseDuration(s.SVIDTTL)
	return d
}

// Kubernetes places the arbiter on a cluster.
type Kubernetes struct {
	Namespace string `json:"namespace"`
	// Image is the arbiter's image, pinned by digest:
	// REPOSITORY@sha256:<64 hex>, the digest `make images` prints for the
	// arbiter. A tag alone is refused: a tag can be moved, so two
	// `lockplane up` runs could deploy different binaries under one stack.
	Image string `json:"image"`
	// HallLabel is the node label whose value is the hall.
	HallLabel string `json:"hallLabel"`
}

// Member is one etcd member: a host and its name in the cluster.
type Member struct {
	Name string
	Host Host
}

// Plan is where everything goes.
type Plan struct {
	Coord    []Member
	Shards   [][]Member
	Tang     []Host
	Arbiters []Host
	// Audit is the audit store's host; nil when audit is off.
	Audit *Host
	// Archive is the audit archive's host; nil when the archive is off.
	Archive *Host
	// Spire is the SPIRE server's host, nil without SPIRE; Workloads the
	// hosts with role workload, each with an agent.
	Spire     *Host
	Workloads []Host
}

var (
	name     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)
	database = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	// pinned is an image reference pinned by digest: a repository (with
	// an optional tag, which the digest overrides) and @sha256:<64 hex>.
	pinned = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)
)

// Defaults fills what a stack may leave out.
func (s *Stack) Defaults() {
	// The old names of the store stack's keys, read as the new ones.
	if s.Snapshots.StoreStack == "" {
		s.Snapshots.StoreStack, s.Snapshots.OldStoreStack = s.Snapshots.OldStoreStack, ""
	}
	if s.Restore.StoreStack == "" {
		s.Restore.StoreStack, s.Restore.OldStoreStack = s.Restore.OldStoreStack, ""
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if s.Runtime == "" {
		s.Runtime = RuntimeHost
	}
	def(&s.Coord.Members, 5)
	def(&s.Entity.Members, 3)
	def(&s.Tang.Servers, 2)
	def(&s.Tang.Port, 7500)
	def(&s.Gates.FsyncSizeMiB, 22)
	def(&s.Etcd.HeartbeatMs, 100)
	def(&s.Etcd.ElectionMs, 1000)
	def(&s.Etcd.ClientPort, 2379)
	def(&s.Etcd.PeerPort, 2380)
	def(&s.Etcd.SnapshotCount, 10000)
	def(&s.Arbiter.Replicas, 1)
	def(&s.Arbiter.Port, 7443)
	def(&s.Arbiter.Metrics, 9464)
	def(&s.Arbiter.FanInPort, 7444)
	def(&s.Audit.HTTPPort, 8123)
	def(&s.Archive.Port, 9000)
	s.Monitoring.defaults()
	def(&s.Spire.Port, 8081)
	if s.Spire.SVIDTTL == "" {
		s.Spire.SVIDTTL = "1h"
	}
	if s.Operators.Issuer != "" {
		if s.Operators.ClientID == "" {
			s.Operators.ClientID = "lockctl"
		}
		if s.Operators.RoleClaim == "" {
			s.Operators.RoleClaim = "roles"
		}
		if s.Operators.Role == "" {
			s.Operators.Role = "lock-operator"
		}
		if len(s.Operators.AMR) == 0 && s.Operators.ACR == "" {
			s.Operators.AMR = []string{"otp", "mfa", "hwk"}
		}
	}
	if s.Restore.Enabled() && s.Restore.From == "" {
		s.Restore.From = Latest
	}
	if s.Snapshots.Enabled() {
		if s.Snapshots.Every == "" {
			s.Snapshots.Every = "1h"
		}
		def(&s.Snapshots.MetricsPort, 9470)
	}
	def(&s.Archive.HistoryDays, 365)
	def(&s.Archive.RecordsYears, 7)
	if s.Archive.RecordsMode == "" {
		s.Archive.RecordsMode = "COMPLIANCE"
	}
	if s.Audit.Database == "" {
		s.Audit.Database = "lockplane"
	}
	if s.Etcd.QuotaBytes == 0 {
		s.Etcd.QuotaBytes = 8 << 30
	}
	if s.Etcd.CompactionPeriod == "" {
		s.Etcd.CompactionPeriod = "1h"
	}
	s.SSH.defaults()
	if s.BinDir == "" {
		s.BinDir = "bin"
	}
	if s.Kubernetes.HallLabel == "" {
		s.Kubernetes.HallLabel = "topology.kubernetes.io/zone"
	}
	rootsDefault(s.Hosts)
}

func (s *SSH) defaults() {
	if s.User == "" {
		s.User = "root"
	}
	if s.ServiceMode == "" {
		s.ServiceMode = "systemd"
	}
}

// rootsDefault gives hosts without a root "/", a real host's.
func rootsDefault(hosts []Host) {
	for i := range hosts {
		if hosts[i].Root == "" {
			hosts[i].Root = "/"
		}
	}
}

// AuditEnabled reports whether the stack runs the audit store: its
// audit.enabled, by default whether a host has role audit.
func (s *Stack) AuditEnabled() bool {
	if s.Audit.Enabled != nil {
		return *s.Audit.Enabled
	}
	return slices.ContainsFunc(s.Hosts, func(h Host) bool { return h.Has(RoleAudit) })
}

// ArchiveEnabled reports whether the stack runs the audit archive: its
// archive.enabled, by default whether a host has role archive.
func (s *Stack) ArchiveEnabled() bool {
	if s.Archive.Enabled != nil {
		return *s.Archive.Enabled
	}
	return slices.ContainsFunc(s.Hosts, func(h Host) bool { return h.Has(RoleArchive) })
}

// HostPath is p on host h, under its root.
func (h Host) HostPath(p string) string { return path.Join(h.Root, p) }

// Has reports whether h has role r.
func (h Host) Has(r string) bool { return slices.Contains(h.Roles, r) }

// Validate checks every field and the topology, returning the plan. Its
// errors name the field or the missing hall or role.
func (s *Stack) Validate() (*Plan, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !name.MatchString(s.Region) {
		bad("region: %q must be a lower-case name (letters, digits, dashes)", s.Region)
	}
	if s.Runtime != RuntimeHost && s.Runtime != RuntimeKubernetes {
		bad("runtime: %q must be %s or %s", s.Runtime, RuntimeHost, RuntimeKubernetes)
	}
	if s.TrustDomain == "" || strings.ContainsAny(s.TrustDomain, "/: ") {
		bad("trustDomain: %q must be a SPIFFE trust domain name such as %s.lockplane.example", s.TrustDomain, s.Region)
	}
	if s.SSH.PrivateKeyFile == "" {
		bad("ssh.privateKeyFile: is required")
	}
	if s.SSH.ServiceMode != "systemd" && s.SSH.ServiceMode != "supervised" {
		bad("ssh.serviceMode: %q must be systemd or supervised", s.SSH.ServiceMode)
	}
	if len(s.Halls) < 3 {
		bad("halls: %d named; a region needs at least three halls so that losing one keeps every quorum", len(s.Halls))
	}
	for i, h := range s.Halls {
		if !name.MatchString(h) || slices.Index(s.Halls, h) != i {
			bad("halls[%d]: %q must be a unique lower-case name", i, h)
		}
	}
	if s.Coord.Members != 5 && s.Coord.Members != 3 {
		bad("coord.members: %d must be 5 (production: 2-2-1 across three halls) or 3 (one per hall)", s.Coord.Members)
	}
	if s.Entity.Members != 3 {
		bad("entity.members: %d must be 3 (one per hall)", s.Entity.Members)
	}
	if s.Entity.Shards < 1 || s.Entity.Shards > 64 {
		bad("entity.shards: %d must be between 1 and 64", s.Entity.Shards)
	}
	if s.Tang.Servers < 2 {
		bad("tang.servers: %d must be at least 2, in different halls", s.Tang.Servers)
	}
	if s.Gates.FsyncP99Ms <= 0 || s.Gates.FsyncP99Ms > 100 {
		bad("gates.fsyncP99Ms: %v must be above 0 and at most 100 (etcd's guidance is under 10)", s.Gates.FsyncP99Ms)
	}
	if s.Gates.AcquireP99Ms <= 0 {
		bad("gates.acquireP99Ms: %v must be positive", s.Gates.AcquireP99Ms)
	}
	if s.Etcd.ElectionMs < 5*s.Etcd.HeartbeatMs || s.Etcd.HeartbeatMs < 10 {
		bad("etcd.electionMs: %d must be at least 5 × etcd.heartbeatMs (%d), which must be at least 10", s.Etcd.ElectionMs, s.Etcd.HeartbeatMs)
	}
	if s.Etcd.QuotaBytes < 1<<30 || s.Etcd.QuotaBytes > 8<<30 {
		bad("etcd.quotaBytes: %d must be between 1 GiB and 8 GiB (etcd's suggested maximum)", s.Etcd.QuotaBytes)
	}
	if d, err := time.ParseDuration(s.Etcd.CompactionPeriod); err != nil || d < time.Minute {
		bad("etcd.compactionPeriod: %q must be a duration of at least 1m, such as 1h", s.Etcd.CompactionPeriod)
	}
	if !s.Etcd.LeaseCheckpoint {
		bad("etcd.leaseCheckpoint: must be true: without it a leader change resets every lease's TTL (ADR-05)")
	}
	if p := s.Arbiter.FanInPort; p < 1 || p > 65535 || p == s.Arbiter.Port || p == s.Arbiter.Metrics {
		bad("arbiter.fanInPort: %d must be a port other than the arbiter's (%d) and its metrics' (%d): both run on each arbiter host", p, s.Arbiter.Port, s.Arbiter.Metrics)
	}
	if s.Arbiter.Replicas < 1 {
		bad("arbiter.replicas: %d must be at least 1", s.Arbiter.Replicas)
	}
	if s.Policies == "" {
		bad("policies: the directory of the region's LockClass and LockGrant documents is required")
	}
	if s.Runtime == RuntimeKubernetes && (s.Kubernetes.Namespace == "" || s.Kubernetes.Image == "") {
		bad("kubernetes.namespace, kubernetes.image: are required with runtime kubernetes")
	}
	if s.Runtime == RuntimeKubernetes && s.Kubernetes.Image != "" && !pinned.MatchString(s.Kubernetes.Image) {
		bad("kubernetes.image: %q must be pinned by digest, REPOSITORY@sha256: and 64 lowercase hex digits (the digest `make images` prints), so every deploy runs the same binary", s.Kubernetes.Image)
	}
	s.validateAudit(bad)
	s.validateArchive(bad)
	s.validateMonitoring(bad)
	s.validateSpire(bad)
	s.validateSnapshots(bad)
	s.validateRestore(bad)
	s.validateRestoreInPlace(bad)
	s.validateOperators(bad)
	s.validateHosts(bad)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return s.place()
}

func (s *Stack) validateHosts(bad func(string, ...any)) {
	seen := map[string]string{}
	for i, h := range s.Hosts {
		where := fmt.Sprintf("hosts[%d] (%s)", i, h.Name)
		if !name.MatchString(h.Name) {
			bad("hosts[%d].name: %q must be a lower-case name", i, h.Name)
		}
		if prev, dup := seen[h.Name]; dup {
			bad("%s.name: also used by %s", where, prev)
		}
		seen[h.Name] = where
		if _, err := netip.ParseAddr(h.Address); err != nil {
			bad("%s.address: %q is not an IP address", where, h.Address)
		} else if prev, dup := seen["addr:"+h.Address]; dup {
			bad("%s.address: %s is also %s's", where, h.Address, prev)
		}
		seen["addr:"+h.Address] = where
		if !slices.Contains(s.Halls, h.Hall) {
			bad("%s.hall: %q is not one of the region's halls %v", where, h.Hall, s.Halls)
		}
		if len(h.Roles) == 0 {
			bad("%s.roles: at least one of %s", where, strings.Join(roles, ", "))
		}
		for _, r := range h.Roles {
			if !slices.Contains(roles, r) {
				bad("%s.roles: %q is not one of %s", where, r, strings.Join(roles, ", "))
			}
		}
		dedicated := 0
		for _, r := range []string{RoleCoord, RoleEntity, RoleTang} {
			if h.Has(r) {
				dedicated++
			}
		}
		if dedicated > 1 || (dedicated == 1 && len(h.Roles) > 1) {
			bad("%s.roles: %v: etcd (coord, entity) and Tang hosts are dedicated and take no other role (ADR-06)", where, h.Roles)
		}
		if h.Has(RoleCoord) || h.Has(RoleEntity) {
			if !path.IsAbs(h.DataDisk) {
				bad("%s.dataDisk: an etcd host needs the absolute path of a directory on its data disk", where)
			}
			if h.LuksDevice == "" || !path.IsAbs(h.LuksDevice) {
				bad("%s.luksDevice: an etcd host needs the absolute path of the device (or image file) to encrypt", where)
			}
		}
		if h.Has(RoleEntity) && (h.Shard < 0 || h.Shard >= s.Entity.Shards) {
			bad("%s.shard: %d is not one of the %d entity shards", where, h.Shard, s.Entity.Shards)
		}
		if h.HostKey == "" && s.SSH.KnownHostsFile == "" && !s.SSH.TrustOnFirstUse {
			bad("%s.hostKey: not pinned, no ssh.knownHostsFile, and ssh.trustOnFirstUse is off: the host cannot be verified", where)
		}
		if !path.IsAbs(h.Root) {
			bad("%s.root: %q must be an absolute path", where, h.Root)
		}
	}
}

// validateAudit checks the audit option against the hosts with role
// audit: zero or one for now (one ClickHouse server, no replication), and
// one when audit is on.
func (s *Stack) validateAudit(bad func(string, ...any)) {
	var hosts []string
	for _, h := range s.Hosts {
		if h.Has(RoleAudit) {
			hosts = append(hosts, h.Name)
		}
	}
	if len(hosts) > 1 {
		bad("audit: hosts %s have role audit; a stack has at most one audit host for now (one ClickHouse server, not replicated)", strings.Join(hosts, ", "))
	}
	if !s.AuditEnabled() {
		return
	}
	if len(hosts) == 0 {
		bad("audit.enabled: true, but no host has role audit: give one host the role (or leave audit.enabled out)")
	}
	if !database.MatchString(s.Audit.Database) {
		bad("audit.database: %q must be a ClickHouse database name (letters, digits, underscores)", s.Audit.Database)
	}
	if s.Audit.HTTPPort < 1 || s.Audit.HTTPPort > 65535 {
		bad("audit.httpPort: %d is not a port", s.Audit.HTTPPort)
	}
	if p := s.Audit.HTTPPort; p == s.Arbiter.Port || p == s.Arbiter.Metrics || p == s.Arbiter.FanInPort {
		bad("audit.httpPort: %d is an arbiter port; the audit host may also be an arbiter host", p)
	}
	for i, n := range s.Audit.Networks {
		if pfx, err := netip.ParsePrefix(n); err == nil && pfx.Bits() == 0 {
			bad("audit.networks[%d]: %q lets every address in; name the arbiters' network", i, n)
		} else if err != nil {
			if _, err := netip.ParseAddr(n); err != nil {
				bad("audit.networks[%d]: %q is not an address or a CIDR prefix", i, n)
			}
		}
	}
	if s.Runtime == RuntimeKubernetes && len(s.Audit.Networks) == 0 {
		bad("audit.networks: required with runtime kubernetes: the arbiter pods' network, which the audit store lets in")
	}
}

// validateSpire checks the SPIRE server's host, port and SVID lifetime.
func (s *Stack) validateSpire(bad func(string, ...any)) {
	var servers, workloads []string
	for _, h := range s.Hosts {
		if h.Has(RoleSpire) {
			servers = append(servers, h.Name)
		}
		if h.Has(RoleWorkload) {
			workloads = append(workloads, h.Name)
		}
	}
	if len(servers) > 1 {
		bad("spire: hosts %s have role spire; a stack has at most one SPIRE server for now", strings.Join(servers, ", "))
	}
	if len(servers) == 0 {
		if len(workloads) > 0 {
			bad("roles: hosts %s have role workload, which needs a SPIRE server: give one host role spire", strings.Join(workloads, ", "))
		}
		return
	}
	if s.Runtime == RuntimeKubernetes {
		bad("spire: runtime kubernetes takes its SVIDs from the stack's CA; SPIRE runs with the host runtime only for now")
	}
	if p := s.Spire.Port; p < 1 || p > 65535 {
		bad("spire.port: %d is not a port", p)
	} else if p == s.Arbiter.Port || p == s.Arbiter.Metrics || p == s.Arbiter.FanInPort || p == s.Audit.HTTPPort || p == s.Archive.Port {
		bad("spire.port: %d is an arbiter's, the audit store's or the archive's port; the spire host may also have those roles", p)
	}
	d, err := time.ParseDuration(s.Spire.SVIDTTL)
	if err != nil || d < time.Minute || d > 24*time.Hour {
		bad("spire.svidTTL: %q must be a duration from 1m to 24h (agents rotate an SVID at half its life)", s.Spire.SVIDTTL)
	}
}

// validateArchive checks the archive option against the hosts with role
// archive: zero or one (one MinIO server), one when the archive is on, and
// the audit store it copies from.
func (s *Stack) validateArchive(bad func(string, ...any)) {
	var hosts []string
	for _, h := range s.Hosts {
		if h.Has(RoleArchive) {
			hosts = append(hosts, h.Name)
		}
	}
	if len(hosts) > 1 {
		bad("archive: hosts %s have role archive; a stack has at most one archive host for now (one MinIO server)", strings.Join(hosts, ", "))
	}
	if !s.ArchiveEnabled() {
		return
	}
	if len(hosts) == 0 {
		bad("archive.enabled: true, but no host has role archive: give one host the role (or leave archive.enabled out)")
	}
	if !s.AuditEnabled() {
		bad("archive: on, but audit is off: the archive copies the audit store's history; give a host role audit")
	}
	if s.Archive.Port < 1 || s.Archive.Port > 65535 {
		bad("archive.port: %d is not a port", s.Archive.Port)
	}
	if p := s.Archive.Port; p == s.Arbiter.Port || p == s.Arbiter.Metrics || p == s.Arbiter.FanInPort || p == s.Audit.HTTPPort {
		bad("archive.port: %d is an arbiter's or the audit store's port; the archive host may also have those roles", p)
	}
	if s.Archive.HistoryDays < 1 {
		bad("archive.historyDays: %d must be at least 1", s.Archive.HistoryDays)
	}
	if s.Archive.RecordsYears < 1 {
		bad("archive.recordsYears: %d must be at least 1", s.Archive.RecordsYears)
	}
	if m := s.Archive.RecordsMode; m != "COMPLIANCE" && m != "GOVERNANCE" {
		bad("archive.recordsMode: %q must be COMPLIANCE or GOVERNANCE", m)
	}
}

// validateOperators checks the operators' provider, when there is one.
func (s *Stack) validateOperators(bad func(string, ...any)) {
	o := s.Operators
	s.validatePeople(bad)
	if o.Issuer == "" {
		if o.CAFile != "" || o.ACR != "" || len(o.AMR) > 0 || o.AccountClaim != "" || len(o.People) > 0 {
			bad("operators: set without operators.issuer: give the provider's URL")
		}
		return
	}
	if u, err := url.Parse(o.Issuer); err != nil || u.Scheme != "https" || u.Host == "" {
		bad("operators.issuer: %q must be the provider's https URL, e.g. https://keycloak.example/realms/lockplane", o.Issuer)
	}
	if err := oidcauth.CheckSecondFactor(o.AMR, o.ACR); err != nil {
		bad("operators: %v (operators sign in with two factors)", err)
	}
}

// validatePeople checks operators.people: each a DNS label, once, and
// none the shared SVID's or another profile identity's name.
func (s *Stack) validatePeople(bad func(string, ...any)) {
	seen := map[string]int{}
	for i, p := range s.Operators.People {
		switch {
		case !person.MatchString(p):
			bad("operators.people[%d]: %q must be a DNS label (a-z, 0-9 and -, at most 63, starting and ending with a letter or digit): "+
				"the person's account, the last segment of their SVID spiffe://%s/operator/<name>", i, p, s.TrustDomain)
		case slices.Contains(reservedPeople, p):
			bad("operators.people[%d]: %q is reserved (%s): give the person's account at the provider", i, p, strings.Join(reservedPeople, ", "))
		}
		if j, dup := seen[p]; dup {
			bad("operators.people[%d]: %q is operators.people[%d] too: each person once, one SVID each", i, p, j)
		}
		seen[p] = i
	}
}

// place assigns members, checking the spread across halls.
func (s *Stack) place() (*Plan, error) {
	var errs []error
	p := &Plan{}
	byRole := func(role string, keep func(Host) bool) map[string][]Host {
		out := map[string][]Host{}
		for _, h := range s.Hosts {
			if h.Has(role) && (keep == nil || keep(h)) {
				out[h.Hall] = append(out[h.Hall], h)
			}
		}
		return out
	}

	// Coord: 2-2-1 over three halls (or 1-1-1 for three members), so any
	// one hall lost leaves a majority.
	coord := byRole(RoleCoord, nil)
	want := []int{2, 2, 1}
	if s.Coord.Members == 3 {
		want = []int{1, 1, 1}
	}
	halls := sortedHalls(s.Halls, coord)
	for i, n := range want {
		if i >= len(halls) || len(coord[halls[i]]) < n {
			errs = append(errs, fmt.Errorf("coord tier: needs %d members split %s across three halls; %s", s.Coord.Members, split(want), shortfall(s.Halls, coord, want)))
			break
		}
	}
	if len(errs) == 0 {
		for i, n := range want {
			for _, h := range coord[halls[i]][:n] {
				p.Coord = append(p.Coord, Member{Name: h.Name, Host: h})
			}
		}
		if total := countHosts(coord); total > s.Coord.Members {
			errs = append(errs, fmt.Errorf("coord tier: %d hosts have role coord, the tier has %d members: remove the role from %d", total, s.Coord.Members, total-s.Coord.Members))
		}
	}

	// Entity shards: one member per hall.
	for shard := 0; shard < s.Entity.Shards; shard++ {
		members := byRole(RoleEntity, func(h Host) bool { return h.Shard == shard })
		var shardMembers []Member
		for _, hall := range s.Halls[:3] {
			switch len(members[hall]) {
			case 0:
				errs = append(errs, fmt.Errorf("entity shard %d: hall %s has no host with role entity and shard %d", shard, hall, shard))
			case 1:
				shardMembers = append(shardMembers, Member{Name: members[hall][0].Name, Host: members[hall][0]})
			default:
				errs = append(errs, fmt.Errorf("entity shard %d: hall %s has %d members; a shard has one per hall", shard, hall, len(members[hall])))
			}
		}
		for _, hall := range s.Halls[3:] {
			if len(members[hall]) > 0 {
				errs = append(errs, fmt.Errorf("entity shard %d: hall %s is not one of the first three halls %v that carry shards", shard, hall, s.Halls[:3]))
			}
		}
		p.Shards = append(p.Shards, shardMembers)
	}

	// Tang: servers in distinct halls.
	tang := byRole(RoleTang, nil)
	if len(tang) < s.Tang.Servers || countHosts(tang) < s.Tang.Servers {
		errs = append(errs, fmt.Errorf("tang: needs %d servers in %d different halls; hosts with role tang are in %s", s.Tang.Servers, s.Tang.Servers, describe(s.Halls, tang)))
	} else {
		for _, hall := range sortedHalls(s.Halls, tang)[:s.Tang.Servers] {
			p.Tang = append(p.Tang, tang[hall][0])
		}
	}

	// Arbiters on hosts: spread over at least two halls when there are
	// two or more.
	if s.Runtime == RuntimeHost {
		arb := byRole(RoleArbiter, nil)
		if countHosts(arb) < s.Arbiter.Replicas {
			errs = append(errs, fmt.Errorf("arbiter: %d replicas on the host runtime need %d hosts with role arbiter; there are %d (%s)", s.Arbiter.Replicas, s.Arbiter.Replicas, countHosts(arb), describe(s.Halls, arb)))
		} else {
			// Round-robin over halls, so replicas spread before they stack.
			for i := 0; len(p.Arbiters) < s.Arbiter.Replicas; i++ {
				for _, hall := range s.Halls {
					if i < len(arb[hall]) && len(p.Arbiters) < s.Arbiter.Replicas {
						p.Arbiters = append(p.Arbiters, arb[hall][i])
					}
				}
			}
		}
	}
	// Audit: the one audit host, when audit is on.
	if s.AuditEnabled() {
		for _, h := range s.Hosts {
			if h.Has(RoleAudit) {
				p.Audit = &h
				break
			}
		}
	}
	if s.ArchiveEnabled() {
		for _, h := range s.Hosts {
			if h.Has(RoleArchive) {
				p.Archive = &h
				break
			}
		}
	}
	for _, h := range s.Hosts {
		if h.Has(RoleSpire) && p.Spire == nil {
			p.Spire = &h
		}
		if h.Has(RoleWorkload) {
			p.Workloads = append(p.Workloads, h)
		}
	}
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return p, nil
}

// sortedHalls orders halls by how many hosts they have for a role, most
// first, keeping the stack's order among equals.
func sortedHalls(halls []string, by map[string][]Host) []string {
	out := slices.Clone(halls)
	sort.SliceStable(out, func(i, j int) bool { return len(by[out[i]]) > len(by[out[j]]) })
	var with []string
	for _, h := range out {
		if len(by[h]) > 0 {
			with = append(with, h)
		}
	}
	return with
}

func countHosts(by map[string][]Host) int {
	n := 0
	for _, hs := range by {
		n += len(hs)
	}
	return n
}

func split(want []int) string {
	parts := make([]string, len(want))
	for i, n := range want {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, "-")
}

func describe(halls []string, by map[string][]Host) string {
	var parts []string
	for _, h := range halls {
		parts = append(parts, fmt.Sprintf("%s: %d", h, len(by[h])))
	}
	return strings.Join(parts, ", ")
}

// shortfall says which halls lack coord hosts.
func shortfall(halls []string, by map[string][]Host, want []int) string {
	var missing []string
	for _, h := range halls {
		if len(by[h]) == 0 {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 && len(sortedHalls(halls, by)) < len(want) {
		return fmt.Sprintf("hosts with role coord by hall are %s: hall %s has none", describe(halls, by), strings.Join(missing, " and hall "))
	}
	return fmt.Sprintf("hosts with role coord by hall are %s", describe(halls, by))
}

func join(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New("the stack cannot be deployed:\n  - " + strings.Join(msgs, "\n  - "))
}
