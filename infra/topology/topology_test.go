package topology_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/program"
	"github.com/lockplane/lockplane/infra/topology"
)

func stackFile(t *testing.T, name string) *topology.Stack {
	t.Helper()
	cfg, err := program.StackFileConfig(filepath.Join("..", "..", "stacks", "Pulumi."+name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// As committed: the e2e test sets these on the same files while it runs.
	for _, k := range []string{"operators", "restoreInPlace", "promotion", "etcdRootPassword"} {
		delete(cfg, program.Namespace+":"+k)
	}
	s, err := program.LoadStack(func(k string) string { return cfg["lockplane:"+k] }, "/repo")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShippedStacksAreValid(t *testing.T) {
	for _, name := range []string{"local", "eu-west", "us-east"} {
		t.Run(name, func(t *testing.T) {
			s := stackFile(t, name)
			p, err := s.Validate()
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Coord) != 5 || len(p.Shards) != s.Entity.Shards || len(p.Tang) != 2 {
				t.Fatalf("plan: %d coord, %d shards, %d tang", len(p.Coord), len(p.Shards), len(p.Tang))
			}
		})
	}
}

// The coord tier is 2-2-1 across three halls: losing any one hall leaves
// three of five members, a majority.
func TestCoordIsSplitTwoTwoOne(t *testing.T) {
	s := stackFile(t, "eu-west")
	p, err := s.Validate()
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, m := range p.Coord {
		per[m.Host.Hall]++
	}
	if len(per) != 3 || per["hall-1"] != 2 || per["hall-2"] != 2 || per["hall-3"] != 1 {
		t.Fatalf("coord members per hall: %v", per)
	}
	for hall, n := range per {
		if 5-n < 3 {
			t.Fatalf("losing %s leaves %d of 5", hall, 5-n)
		}
	}
	for i, shard := range p.Shards {
		halls := map[string]bool{}
		for _, m := range shard {
			halls[m.Host.Hall] = true
		}
		if len(shard) != 3 || len(halls) != 3 {
			t.Fatalf("shard %d: %d members in %d halls", i, len(shard), len(halls))
		}
	}
}

// Each broken topology is refused with a message naming what is missing.
func TestBrokenTopologiesAreRefusedByName(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(s *topology.Stack)
		want   string
	}{
		{"coord hosts in two halls", func(s *topology.Stack) { moveRole(s, "coord", "hall-3", "hall-2") },
			"coord tier: needs 5 members split 2-2-1 across three halls; hosts with role coord by hall are hall-1: 2, hall-2: 3, hall-3: 0: hall hall-3 has none"},
		{"coord hall with one host", func(s *topology.Stack) { moveRole(s, "coord", "hall-2", "hall-1") },
			"coord tier: needs 5 members split 2-2-1 across three halls"},
		{"shard without a hall", func(s *topology.Stack) { dropHost(s, "eu-west-e1-2") },
			"entity shard 1: hall hall-2 has no host with role entity and shard 1"},
		{"tang in one hall", func(s *topology.Stack) { s.Hosts[hostIndex(s, "eu-west-tang-2")].Hall = "hall-1" },
			"tang: needs 2 servers in 2 different halls; hosts with role tang are in hall-1: 2, hall-2: 0, hall-3: 0"},
		{"etcd host shared with the arbiter", func(s *topology.Stack) {
			i := hostIndex(s, "eu-west-coord-1")
			s.Hosts[i].Roles = append(s.Hosts[i].Roles, "arbiter")
		}, "hosts[0] (eu-west-coord-1).roles: [coord arbiter]: etcd (coord, entity) and Tang hosts are dedicated"},
		{"too few arbiter hosts", func(s *topology.Stack) { s.Arbiter.Replicas = 4 },
			"arbiter: 4 replicas on the host runtime need 4 hosts with role arbiter; there are 3"},
		{"unknown hall", func(s *topology.Stack) { s.Hosts[0].Hall = "hall-9" },
			`hosts[0] (eu-west-coord-1).hall: "hall-9" is not one of the region's halls`},
		{"two halls", func(s *topology.Stack) { s.Halls = s.Halls[:2] }, "halls: 2 named; a region needs at least three halls"},
		{"lease checkpointing off", func(s *topology.Stack) { s.Etcd.LeaseCheckpoint = false }, "etcd.leaseCheckpoint: must be true"},
		{"quota too big", func(s *topology.Stack) { s.Etcd.QuotaBytes = 16 << 30 }, "etcd.quotaBytes: 17179869184 must be between 1 GiB and 8 GiB"},
		{"unpinned host", func(s *topology.Stack) { s.Hosts[3].HostKey = "" }, "hosts[3] (eu-west-coord-4).hostKey: not pinned"},
		{"no policy set", func(s *topology.Stack) { s.Policies = "" }, "policies: the directory of the region's LockClass and LockGrant documents is required"},
		{"audit on an etcd host", func(s *topology.Stack) { addRole(s, "eu-west-coord-1", "audit") },
			"hosts[0] (eu-west-coord-1).roles: [coord audit]: etcd (coord, entity) and Tang hosts are dedicated"},
		{"audit on a tang host", func(s *topology.Stack) { addRole(s, "eu-west-tang-1", "audit") },
			"(eu-west-tang-1).roles: [tang audit]: etcd (coord, entity) and Tang hosts are dedicated"},
		{"two audit hosts", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "audit")
			addRole(s, "eu-west-arbiter-2", "audit")
		},
			"audit: hosts eu-west-arbiter-1, eu-west-arbiter-2 have role audit; a stack has at most one audit host for now"},
		{"audit enabled without a host", func(s *topology.Stack) { on := true; s.Audit.Enabled = &on },
			"audit.enabled: true, but no host has role audit"},
		{"bad audit database", func(s *topology.Stack) { addRole(s, "eu-west-arbiter-1", "audit"); s.Audit.Database = "lock-plane" },
			`audit.database: "lock-plane" must be a ClickHouse database name`},
		{"bad audit network", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "audit")
			s.Audit.Networks = []string{"10.0.0.0/33"}
		},
			`audit.networks[0]: "10.0.0.0/33" is not an address or a CIDR prefix`},
		{"an audit network of every address", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "audit")
			s.Audit.Networks = []string{"0.0.0.0/0"}
		},
			`audit.networks[0]: "0.0.0.0/0" lets every address in`},
		{"an audit port on an arbiter port", func(s *topology.Stack) { addRole(s, "eu-west-arbiter-1", "audit"); s.Audit.HTTPPort = s.Arbiter.Port },
			"audit.httpPort: 7443 is an arbiter port"},
		{"unknown role", func(s *topology.Stack) { addRole(s, "eu-west-arbiter-1", "backup") },
			`roles: "backup" is not one of coord, entity, tang, arbiter, audit, archive`},
		{"operators over http", func(s *topology.Stack) { s.Operators.Issuer = "http://keycloak/realms/x" },
			`operators.issuer: "http://keycloak/realms/x" must be the provider's https URL`},
		{"operators without an issuer", func(s *topology.Stack) { s.Operators.ACR = "2" },
			"operators: set without operators.issuer"},
		{"operator people without an issuer", func(s *topology.Stack) { s.Operators.People = []string{"alice", "bob"} },
			"operators: set without operators.issuer"},
		{"an operator who is not a DNS label", func(s *topology.Stack) {
			s.Operators.Issuer, s.Operators.People = "https://keycloak.test/realms/x", []string{"alice", "Bob/admin"}
		}, `operators.people[1]: "Bob/admin" must be a DNS label`},
		{"an operator named twice", func(s *topology.Stack) {
			s.Operators.Issuer, s.Operators.People = "https://keycloak.test/realms/x", []string{"alice", "bob", "alice"}
		}, `operators.people[2]: "alice" is operators.people[0] too: each person once`},
		{"an operator named as the shared SVID", func(s *topology.Stack) {
			s.Operators.Issuer, s.Operators.People = "https://keycloak.test/realms/x", []string{"deployer"}
		}, `operators.people[0]: "deployer" is reserved`},
		{"archive without audit", func(s *topology.Stack) { addRole(s, "eu-west-arbiter-1", "archive") },
			"archive: on, but audit is off"},
		{"two archive hosts", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "audit")
			addRole(s, "eu-west-arbiter-1", "archive")
			addRole(s, "eu-west-arbiter-2", "archive")
		}, "archive: hosts eu-west-arbiter-1, eu-west-arbiter-2 have role archive"},
		{"two spire hosts", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "spire")
			addRole(s, "eu-west-arbiter-2", "spire")
		}, "spire: hosts eu-west-arbiter-1, eu-west-arbiter-2 have role spire; a stack has at most one SPIRE server"},
		{"workload hosts without a spire host", func(s *topology.Stack) { addRole(s, "eu-west-arbiter-1", "workload") },
			"roles: hosts eu-west-arbiter-1 have role workload, which needs a SPIRE server"},
		{"spire on an etcd host", func(s *topology.Stack) { addRole(s, "eu-west-coord-1", "spire") },
			"(eu-west-coord-1).roles: [coord spire]: etcd (coord, entity) and Tang hosts are dedicated"},
		{"spire SVIDs of a few seconds", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "spire")
			s.Spire.SVIDTTL = "20s"
		}, `spire.svidTTL: "20s" must be a duration from 1m to 24h`},
		{"spire port on the arbiter's", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "spire")
			s.Spire.Port = s.Arbiter.Port
		}, "spire.port: 7443 is an arbiter's"},
		{"archive on an etcd host", func(s *topology.Stack) { addRole(s, "eu-west-coord-1", "archive") },
			"(eu-west-coord-1).roles: [coord archive]: etcd (coord, entity) and Tang hosts are dedicated"},
		{"archive port on the audit port", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "audit")
			addRole(s, "eu-west-arbiter-1", "archive")
			s.Archive.Port = s.Audit.HTTPPort
		}, "archive.port: 8123 is an arbiter's or the audit store's port"},
		{"archive retention mode", func(s *topology.Stack) {
			addRole(s, "eu-west-arbiter-1", "audit")
			addRole(s, "eu-west-arbiter-1", "archive")
			s.Archive.RecordsMode = "forever"
		}, `archive.recordsMode: "forever" must be COMPLIANCE or GOVERNANCE`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := stackFile(t, "eu-west")
			c.break_(s)
			_, err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing\n  %s\ngot\n  %v", c.want, err)
			}
		})
	}
}

// The audit role: zero or one host, its own or shared with an arbiter;
// on by default when a host has it, off with audit.enabled false.
func TestAuditHostIsPlanned(t *testing.T) {
	s := stackFile(t, "local")
	p, err := s.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if p.Audit == nil || p.Audit.Name != "audit-1" || s.Audit.Database != "lockplane" || s.Audit.HTTPPort != 8123 {
		t.Fatalf("local stack's audit: host %v, database %q, port %d", p.Audit, s.Audit.Database, s.Audit.HTTPPort)
	}
	if p.Archive == nil || p.Archive.Name != "archive-1" || s.Archive.Port != 9000 || s.Archive.RecordsMode != "GOVERNANCE" {
		t.Fatalf("local stack's archive: host %v, port %d, mode %s", p.Archive, s.Archive.Port, s.Archive.RecordsMode)
	}
	off := false
	s.Audit.Enabled = &off
	if _, err := s.Validate(); err == nil || !strings.Contains(err.Error(), "archive: on, but audit is off") {
		t.Fatalf("audit off under an archive: %v", err)
	}
	s.Archive.Enabled = &off
	if p, err := s.Validate(); err != nil || p.Audit != nil || p.Archive != nil {
		t.Fatalf("audit.enabled and archive.enabled false: plan %v %v, %v", p.Audit, p.Archive, err)
	}

	s = stackFile(t, "eu-west")
	if p, err := s.Validate(); err != nil || p.Audit != nil || s.AuditEnabled() {
		t.Fatalf("a stack without an audit host: %v, %v", p.Audit, err)
	}
	addRole(s, "eu-west-arbiter-2", "audit")
	if p, err := s.Validate(); err != nil || p.Audit == nil || p.Audit.Name != "eu-west-arbiter-2" {
		t.Fatalf("audit shared with an arbiter host: %v", err)
	}

	s = stackFile(t, "us-east")
	s.Hosts = append(s.Hosts, topology.Host{Name: "us-east-audit-1", Address: "10.9.9.9", Hall: s.Halls[0], Roles: []string{"audit"},
		HostKey: s.Hosts[0].HostKey, Root: "/"})
	if _, err := s.Validate(); err == nil || !strings.Contains(err.Error(), "audit.networks: required with runtime kubernetes") {
		t.Fatalf("kubernetes runtime without audit.networks: %v", err)
	}
	s.Audit.Networks = []string{"10.64.0.0/14"}
	if _, err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesImageIsPinnedByDigest: a tag alone, or a digest that is not
// sha256 and 64 lowercase hex digits, is refused naming kubernetes.image.
func TestKubernetesImageIsPinnedByDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, image := range []string{
		"registry.example/lockplane/arbiter@" + digest,
		"registry.example:5000/lockplane/arbiter:v0.1.0@" + digest,
	} {
		s := stackFile(t, "us-east")
		s.Kubernetes.Image = image
		if _, err := s.Validate(); err != nil {
			t.Errorf("%s: %v", image, err)
		}
	}
	for _, image := range []string{
		"registry.example/lockplane/arbiter:v0.1.0",
		"registry.example/lockplane/arbiter@sha256:0123",
		"registry.example/lockplane/arbiter@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
		"@" + digest,
	} {
		s := stackFile(t, "us-east")
		s.Kubernetes.Image = image
		_, err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), "kubernetes.image: \""+image+"\" must be pinned by digest") {
			t.Errorf("%s: %v, want kubernetes.image refused as not pinned by digest", image, err)
		}
	}
}

func addRole(s *topology.Stack, host, role string) {
	i := hostIndex(s, host)
	s.Hosts[i].Roles = append(s.Hosts[i].Roles, role)
}

func hostIndex(s *topology.Stack, name string) int {
	for i, h := range s.Hosts {
		if h.Name == name {
			return i
		}
	}
	panic(fmt.Sprintf("no host %s", name))
}

func dropHost(s *topology.Stack, name string) {
	i := hostIndex(s, name)
	s.Hosts = append(s.Hosts[:i], s.Hosts[i+1:]...)
}

// moveRole moves the first host of role from one hall to another.
func moveRole(s *topology.Stack, role, from, to string) {
	for i, h := range s.Hosts {
		if h.Has(role) && h.Hall == from {
			s.Hosts[i].Hall = to
			return
		}
	}
}
