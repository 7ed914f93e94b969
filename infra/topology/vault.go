package topology

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"time"
)

// RoleVault is the snapshot vault's host: MinIO, where the snapshot jobs
// of one or more regions store their clusters' snapshots (docs/dr.md). It
// lives in a stack of its own (VaultStack), so that it outlives the
// regions it keeps, and is never a host of a region stack.
const RoleVault = "vault"

// Snapshots is a region's snapshot schedule (docs/dr.md): a job on every
// etcd member host, one elected per cluster, storing into the vault that
// the stack VaultStack deployed.
type Snapshots struct {
	// VaultStack is the vault's stack (a stacks/Pulumi.<name>.yaml with
	// lockplane:vault), in the same Pulumi backend. Empty: no snapshots.
	VaultStack string `json:"vaultStack,omitempty"`
	// Every is the schedule (1h); from 1m to 168h.
	Every string `json:"every,omitempty"`
	// MetricsPort is the job's Prometheus port on each member host's
	// address (9470).
	MetricsPort int `json:"metricsPort,omitempty"`
}

// Enabled reports whether the region snapshots its clusters.
func (s Snapshots) Enabled() bool { return s.VaultStack != "" }

func (s *Stack) validateSnapshots(bad func(string, ...any)) {
	sn := s.Snapshots
	if !sn.Enabled() {
		if sn.Every != "" || sn.MetricsPort != 0 {
			bad("snapshots: set without snapshots.vaultStack: name the vault's stack")
		}
		return
	}
	if !name.MatchString(sn.VaultStack) {
		bad("snapshots.vaultStack: %q must be a stack name (lower-case letters, digits, dashes)", sn.VaultStack)
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

// VaultStack is the configuration of a snapshot vault's own stack: one
// MinIO server, a versioned bucket per region it keeps, and a user per
// region that stores and one that restores.
type VaultStack struct {
	Vault Vault  `json:"vault"`
	Hosts []Host `json:"hosts"`
	SSH   SSH    `json:"ssh"`
	// BinDir holds minio, on the machine running the program.
	BinDir string `json:"binDir"`
}

// Vault is the vault's service.
type Vault struct {
	// Regions are the regions whose snapshots it keeps: a bucket
	// lockplane-snapshots-REGION each, and per cluster of the region a
	// storer confined to the cluster's prefix and a signing key.
	Regions []VaultRegion `json:"regions"`
	// Port is MinIO's S3 API on the vault host's address (9000).
	Port int `json:"port,omitempty"`
	// KeepDays is how long a snapshot (and a replaced version) is kept (30).
	KeepDays int `json:"keepDays,omitempty"`
}

// VaultRegion is one region the vault keeps: its name and how many
// entity shards it has (its stack's lockplane:entity.shards), which name
// its clusters: each gets its own storer and snapshot signing key, so a
// host of one cluster can neither write nor sign another's snapshots.
type VaultRegion struct {
	Region string `json:"region"`
	Shards int    `json:"shards"`
}

// UnmarshalJSON reads {region, shards}, and names that form when given a
// plain region name (the form before clusters had their own storers).
func (r *VaultRegion) UnmarshalJSON(b []byte) error {
	var old string
	if json.Unmarshal(b, &old) == nil {
		return fmt.Errorf("vault.regions: %q: each region is now {region: %s, shards: N}, N its stack's lockplane:entity.shards: "+
			"the vault makes a storer and a snapshot signing key per cluster (docs/dr.md)", old, old)
	}
	type plain VaultRegion
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(r))
}

// Clusters are the region's clusters: coord, entity-0 ... entity-(Shards-1).
func (r VaultRegion) Clusters() []string { return RegionClusters(r.Shards) }

// RegionClusters are the cluster names of a region of shards entity
// shards: coord first.
func RegionClusters(shards int) []string {
	out := []string{"coord"}
	for i := 0; i < shards; i++ {
		out = append(out, fmt.Sprintf("entity-%d", i))
	}
	return out
}

// Defaults fills what a vault stack may leave out.
func (v *VaultStack) Defaults() {
	if v.Vault.Port == 0 {
		v.Vault.Port = 9000
	}
	if v.Vault.KeepDays == 0 {
		v.Vault.KeepDays = 30
	}
	v.SSH.defaults()
	if v.BinDir == "" {
		v.BinDir = "bin"
	}
	rootsDefault(v.Hosts)
}

// Validate checks the vault stack and returns its one host. Its errors
// name the field.
func (v *VaultStack) Validate() (Host, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(v.Vault.Regions) == 0 {
		bad("vault.regions: name at least one region whose snapshots the vault keeps")
	}
	seen := map[string]bool{}
	for i, r := range v.Vault.Regions {
		if !name.MatchString(r.Region) || seen[r.Region] {
			bad("vault.regions[%d].region: %q must be a unique lower-case region name", i, r.Region)
		}
		seen[r.Region] = true
		if r.Shards < 1 || r.Shards > 64 {
			bad("vault.regions[%d].shards: %d must be the region's lockplane:entity.shards (1 to 64)", i, r.Shards)
		}
	}
	if v.Vault.Port < 1 || v.Vault.Port > 65535 {
		bad("vault.port: %d is not a port", v.Vault.Port)
	}
	if v.Vault.KeepDays < 1 {
		bad("vault.keepDays: %d must be at least 1", v.Vault.KeepDays)
	}
	if v.SSH.PrivateKeyFile == "" {
		bad("ssh.privateKeyFile: is required")
	}
	if v.SSH.ServiceMode != "systemd" && v.SSH.ServiceMode != "supervised" {
		bad("ssh.serviceMode: %q must be systemd or supervised", v.SSH.ServiceMode)
	}
	if len(v.Hosts) != 1 {
		bad("hosts: %d given; a vault stack has one host, with role %s", len(v.Hosts), RoleVault)
	}
	for i, h := range v.Hosts {
		where := fmt.Sprintf("hosts[%d] (%s)", i, h.Name)
		if !name.MatchString(h.Name) {
			bad("hosts[%d].name: %q must be a lower-case name", i, h.Name)
		}
		if _, err := netip.ParseAddr(h.Address); err != nil {
			bad("%s.address: %q is not an IP address", where, h.Address)
		}
		if len(h.Roles) != 1 || h.Roles[0] != RoleVault {
			bad("%s.roles: %v must be [%s]: the vault's host is dedicated", where, h.Roles, RoleVault)
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

// Hosting is what host-level components read of a stack, for the vault's:
// its hosts, SSH and binaries. It is no region.
func (v *VaultStack) Hosting() *Stack {
	return &Stack{Region: "vault", Hosts: v.Hosts, SSH: v.SSH, BinDir: v.BinDir}
}
