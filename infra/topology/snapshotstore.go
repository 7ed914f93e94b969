package topology

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"time"
)

// RoleSnapshotStore is the snapshot store's host: MinIO, where the snapshot
// jobs of one or more regions store their clusters' snapshots (docs/dr.md).
// It lives in a stack of its own (the store stack), so that it outlives
// the regions it keeps, and is never a host of a region stack.
const RoleSnapshotStore = "snapshot-store"

// Names the snapshot store had before it was renamed: a stack written with
// them keeps working, unchanged (docs/dr.md, "Old names").
const (
	oldRoleSnapshotStore = "vault"
	oldStoreKey          = "vault"
	oldStoreStackKey     = "vaultStack"
)

// Snapshots is a region's snapshot schedule (docs/dr.md): a job on every
// etcd member host, one elected per cluster, storing into the snapshot store that
// the stack StoreStack deployed.
type Snapshots struct {
	// StoreStack is the snapshot store's stack (a stacks/Pulumi.<name>.yaml with
	// lockplane:snapshotStore), in the same Pulumi backend. Empty: no snapshots.
	StoreStack string `json:"storeStack,omitempty"`
	// OldStoreStack is vaultStack, StoreStack's old name: read as it.
	OldStoreStack string `json:"vaultStack,omitempty"`
	// Every is the schedule (1h); from 1m to 168h.
	Every string `json:"every,omitempty"`
	// MetricsPort is the job's Prometheus port on each member host's
	// address (9470).
	MetricsPort int `json:"metricsPort,omitempty"`
}

// Enabled reports whether the region snapshots its clusters.
func (s Snapshots) Enabled() bool { return s.StoreStack != "" }

func (s *Stack) validateSnapshots(bad func(string, ...any)) {
	sn := s.Snapshots
	if sn.OldStoreStack != "" {
		bad("snapshots.%s: is the old name of snapshots.storeStack: set only storeStack", oldStoreStackKey)
	}
	if !sn.Enabled() {
		if sn.Every != "" || sn.MetricsPort != 0 {
			bad("snapshots: set without snapshots.storeStack: name the snapshot store's stack")
		}
		return
	}
	if !name.MatchString(sn.StoreStack) {
		bad("snapshots.storeStack: %q must be a stack name (lower-case letters, digits, dashes)", sn.StoreStack)
	}
	if d, err := time.ParseDuration(sn.Every); err != nil || d < time.Minute || d > 168*time.Hour {
		bad("snapshots.every: %q must be a duration from 1m to 168h, such as 1h", sn.Every)
	}
	p := sn.MetricsPort
	if p < 1 || p > 65535 {
		bad("snapshots.metricsPort: %d is not a port", p)
	} else if p == s.Etcd.ClientPort || p == s.Etcd.PeerPort || p == s.Etcd.MetricsPort() {
		bad("snapshots.metricsPort: %d is one of etcd's ports on the member hosts", p)
	}
}

// StoreConfig is the configuration of a snapshot store's own stack: one
// MinIO server, a versioned bucket per region it keeps, and a user per
// region that stores and one that restores.
type StoreConfig struct {
	Store SnapshotStore `json:"snapshotStore"`
	// OldStore is lockplane:snapshot store, the key's old name: read as Store.
	OldStore *SnapshotStore `json:"vault,omitempty"`
	Hosts    []Host         `json:"hosts"`
	SSH      SSH            `json:"ssh"`
	// BinDir holds minio, on the machine running the program.
	BinDir string `json:"binDir"`
}

// SnapshotStore is the snapshot store's service.
type SnapshotStore struct {
	// Regions are the regions whose snapshots it keeps: a bucket
	// lockplane-snapshots-REGION each, and per cluster of the region a
	// storer confined to the cluster's prefix and a signing key.
	Regions []StoreRegion `json:"regions"`
	// Port is MinIO's S3 API on the snapshot store host's address (9000).
	Port int `json:"port,omitempty"`
	// KeepDays is how long a snapshot (and a replaced version) is kept (30).
	KeepDays int `json:"keepDays,omitempty"`
}

// StoreRegion is one region the snapshot store keeps: its name and how many
// entity shards it has (its stack's lockplane:entity.shards), which name
// its clusters: each gets its own storer and snapshot signing key, so a
// host of one cluster can neither write nor sign another's snapshots.
type StoreRegion struct {
	Region string `json:"region"`
	Shards int    `json:"shards"`
}

// UnmarshalJSON reads {region, shards}, and names that form when given a
// plain region name (the form before clusters had their own storers).
func (r *StoreRegion) UnmarshalJSON(b []byte) error {
	var old string
	if json.Unmarshal(b, &old) == nil {
		return fmt.Errorf("snapshotStore.regions: %q: each region is now {region: %s, shards: N}, N its stack's lockplane:entity.shards: "+
			"the snapshot store makes a storer and a snapshot signing key per cluster (docs/dr.md)", old, old)
	}
	type plain StoreRegion
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(r))
}

func (s SnapshotStore) isZero() bool { return len(s.Regions) == 0 && s.Port == 0 && s.KeepDays == 0 }

// Clusters are the region's clusters: coord, entity-0 ... entity-(Shards-1).
func (r StoreRegion) Clusters() []string { return RegionClusters(r.Shards) }

// RegionClusters are the cluster names of a region of shards entity
// shards: coord first.
func RegionClusters(shards int) []string {
	out := []string{"coord"}
	for i := 0; i < shards; i++ {
		out = append(out, fmt.Sprintf("entity-%d", i))
	}
	return out
}

// Defaults fills what a store stack may leave out.
func (v *StoreConfig) Defaults() {
	if v.OldStore != nil && v.Store.isZero() {
		v.Store, v.OldStore = *v.OldStore, nil
	}
	for i := range v.Hosts {
		if len(v.Hosts[i].Roles) == 1 && v.Hosts[i].Roles[0] == oldRoleSnapshotStore {
			v.Hosts[i].Roles = []string{RoleSnapshotStore}
		}
	}
	if v.Store.Port == 0 {
		v.Store.Port = 9000
	}
	if v.Store.KeepDays == 0 {
		v.Store.KeepDays = 30
	}
	v.SSH.defaults()
	if v.BinDir == "" {
		v.BinDir = "bin"
	}
	rootsDefault(v.Hosts)
}

// Validate checks the store stack and returns its one host. Its errors
// name the field.
func (v *StoreConfig) Validate() (Host, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if v.OldStore != nil {
		bad("%s: is the old name of snapshotStore: set only snapshotStore", oldStoreKey)
	}
	if len(v.Store.Regions) == 0 {
		bad("snapshotStore.regions: name at least one region whose snapshots the snapshot store keeps")
	}
	seen := map[string]bool{}
	for i, r := range v.Store.Regions {
		if !name.MatchString(r.Region) || seen[r.Region] {
			bad("snapshotStore.regions[%d].region: %q must be a unique lower-case region name", i, r.Region)
		}
		seen[r.Region] = true
		if r.Shards < 1 || r.Shards > 64 {
			bad("snapshotStore.regions[%d].shards: %d must be the region's lockplane:entity.shards (1 to 64)", i, r.Shards)
		}
	}
	if v.Store.Port < 1 || v.Store.Port > 65535 {
		bad("snapshotStore.port: %d is not a port", v.Store.Port)
	}
	if v.Store.KeepDays < 1 {
		bad("snapshotStore.keepDays: %d must be at least 1", v.Store.KeepDays)
	}
	if v.SSH.PrivateKeyFile == "" {
		bad("ssh.privateKeyFile: is required")
	}
	if v.SSH.ServiceMode != "systemd" && v.SSH.ServiceMode != "supervised" {
		bad("ssh.serviceMode: %q must be systemd or supervised", v.SSH.ServiceMode)
	}
	if len(v.Hosts) != 1 {
		bad("hosts: %d given; a store stack has one host, with role %s", len(v.Hosts), RoleSnapshotStore)
	}
	for i, h := range v.Hosts {
		where := fmt.Sprintf("hosts[%d] (%s)", i, h.Name)
		if !name.MatchString(h.Name) {
			bad("hosts[%d].name: %q must be a lower-case name", i, h.Name)
		}
		if _, err := netip.ParseAddr(h.Address); err != nil {
			bad("%s.address: %q is not an IP address", where, h.Address)
		}
		if len(h.Roles) != 1 || h.Roles[0] != RoleSnapshotStore {
			bad("%s.roles: %v must be [%s]: the snapshot store's host is dedicated", where, h.Roles, RoleSnapshotStore)
		}
		if h.HostKey == "" && v.SSH.KnownHostsFile == "" && !v.SSH.TrustOnFirstUse {
			bad("%s.hostKey: not pinned, no ssh.knownHostsFile, and ssh.trustOnFirstUse is off: the host cannot be verified", where)
		}
		if !path.IsAbs(h.Root) {
			bad("%s.root: %q must be an absolute path", where, h.Root)
		}
	}
	if len(errs) > 0 {
		return Host{}, join(errs)
	}
	return v.Hosts[0], nil
}

// Hosting is what host-level components read of a stack, for the snapshot store's:
// its hosts, SSH and binaries. It is no region.
func (v *StoreConfig) Hosting() *Stack {
	return &Stack{Region: "vault", Hosts: v.Hosts, SSH: v.SSH, BinDir: v.BinDir}
}
