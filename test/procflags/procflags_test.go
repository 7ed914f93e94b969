package procflags_test

import (
	"flag"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/test/arbiterproc"
	"github.com/lockplane/lockplane/test/procflags"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// arbiter and etcd set every field, so every flag Args can give is
// checked.
var (
	arbiter = procflags.Arbiter{Listen: "127.0.0.1:1", MetricsListen: "127.0.0.1:2", EtcdEndpoints: []string{"http://a", "http://b"},
		Shards:       []procflags.Shard{{Name: "s1", Endpoints: []string{"http://c", "http://d"}}, {Name: "s2", Endpoints: []string{"http://e"}}},
		SPIFFESocket: "unix:///agent.sock", SPIFFEID: "spiffe://td/arbiter", SVIDCert: "svid.pem", SVIDKey: "key.pem", Bundle: "bundle.pem",
		TrustDomain: "td", Policies: "policies", OpTimeout: 1500 * time.Millisecond, AllowAnyWorkload: true, EtcdWithoutAuth: true,
		Classes: []string{"gate=3s:entity", "coord=3s"}, GroupCommit: 4, Extra: []string{"--region", "eu"}}
	etcd = procflags.Etcd{Name: "m1", DataDir: "m1.etcd", ListenClient: "http://127.0.0.1:1", AdvertiseClient: "http://127.0.0.1:3",
		ListenPeer: "http://127.0.0.1:2", AdvertisePeer: "http://127.0.0.1:4", InitialCluster: []string{"m1=http://127.0.0.1:4", "m2=http://127.0.0.1:6"},
		Token: "t", State: "new", FeatureGates: procflags.LeaseCheckpoints, AutoCompactionMode: "periodic", AutoCompactionRetention: "1h",
		LogLevel: "warn", LogOutputs: "m1.log", Extra: []string{"--snapshot-count", "100"}}
)

func TestArgs(t *testing.T) {
	want := []string{"--listen", "127.0.0.1:1", "--metrics-listen", "127.0.0.1:2", "--etcd-endpoints", "http://a,http://b",
		"--shard", "s1=http://c,http://d", "--shard", "s2=http://e", "--spiffe-socket", "unix:///agent.sock", "--spiffe-id", "spiffe://td/arbiter",
		"--svid-cert", "svid.pem", "--svid-key", "key.pem", "--bundle", "bundle.pem", "--trust-domain", "td", "--policies", "policies",
		"--op-timeout", "1.5s", "--allow-any-workload", "--etcd-without-auth", "--class", "gate=3s:entity", "--class", "coord=3s",
		"--group-commit", "4", "--region", "eu"}
	if got := arbiter.Args(); !slices.Equal(got, want) {
		t.Errorf("Arbiter.Args:\n got %q\nwant %q", got, want)
	}
	if got := (procflags.Arbiter{}).Args(); len(got) != 0 {
		t.Errorf("an empty Arbiter gives %q, want no flags (the arbiter's defaults)", got)
	}
	want = []string{"--name", "m1", "--data-dir", "m1.etcd", "--listen-client-urls", "http://127.0.0.1:1", "--advertise-client-urls", "http://127.0.0.1:3",
		"--listen-peer-urls", "http://127.0.0.1:2", "--initial-advertise-peer-urls", "http://127.0.0.1:4",
		"--initial-cluster", "m1=http://127.0.0.1:4,m2=http://127.0.0.1:6", "--initial-cluster-token", "t", "--initial-cluster-state", "new",
		"--feature-gates", "LeaseCheckpoint=true,LeaseCheckpointPersist=true", "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h",
		"--log-level", "warn", "--log-outputs", "m1.log", "--snapshot-count", "100"}
	if got := etcd.Args(); !slices.Equal(got, want) {
		t.Errorf("Etcd.Args:\n got %q\nwant %q", got, want)
	}
}

// TestBinariesTakeArgs parses each Args with the flags the built binary's
// usage lists: a flag renamed or removed there, or a bool given a value
// here, fails it.
func TestBinariesTakeArgs(t *testing.T) {
	bins, err := arbiterproc.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	parse(t, bins.Arbiter, "-h", arbiterUsage, arbiterBool, arbiter.Args())
	parse(t, bins.Etcd, "--help", etcdUsage, etcdBool, etcd.Args())
}

var (
	// Go's flag usage: "  -name type" ("  -name" alone for a bool); the
	// type is the usage's `quoted` words where it has them.
	arbiterUsage = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)( .+)?$`)
	arbiterBool  = func(m []string) bool { return m[2] == "" }
	// etcd's: "  --name 'default'", a bool's default 'true' or 'false'.
	etcdUsage = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)( '[^']*')?$`)
	etcdBool  = func(m []string) bool { return m[2] == " 'true'" || m[2] == " 'false'" }
)

func parse(t *testing.T, bin, help string, usage *regexp.Regexp, isBool func([]string) bool, args []string) {
	t.Helper()
	// -h exits non-zero; its usage is what matters.
	out, _ := exec.Command(bin, help).CombinedOutput()
	fs := flag.NewFlagSet(bin, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, m := range usage.FindAllStringSubmatch(string(out), -1) {
		if isBool(m) {
			fs.Bool(m[1], false, "")
		} else {
			fs.String(m[1], "", "")
		}
	}
	if n := len(usage.FindAllString(string(out), -1)); n < 20 {
		t.Fatalf("%s %s lists %d flags: the usage pattern is wrong\n%s", bin, help, n, out)
	}
	if err := fs.Parse(args); err != nil {
		t.Errorf("%s: %v", filepath.Base(bin), err)
	} else if fs.NArg() != 0 {
		t.Errorf("%s: parsing stops at %q (a bool given a value?)", filepath.Base(bin), fs.Args())
	}
}

// TestTheDeployedCommandLinesParse holds the command lines `up` deploys
// (infra/components, every option on) to the same flag sets: a flag
// renamed in the arbiter or etcd fails here in seconds, not in the
// end-to-end drill after a region comes up.
func TestTheDeployedCommandLinesParse(t *testing.T) {
	bins, err := arbiterproc.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := &topology.Stack{Region: "eu", TrustDomain: "eu.lockplane.test"}
	s.Arbiter.Port, s.Arbiter.Metrics = 7443, 9443
	s.Etcd.ClientPort, s.Etcd.PeerPort, s.Etcd.HeartbeatMs, s.Etcd.ElectionMs = 2379, 2380, 100, 1000
	s.Etcd.QuotaBytes, s.Etcd.CompactionPeriod, s.Etcd.SnapshotCount = 8<<30, "1h", 10000
	s.Operators.Issuer, s.Operators.ClientID, s.Operators.RoleClaim, s.Operators.Role = "https://idp", "lockplane", "roles", "ops"
	s.Operators.AMR, s.Operators.ACR, s.Operators.AccountClaim = []string{"mfa"}, "gold", "email"
	s.Archive.RecordsMode, s.Archive.HistoryDays, s.Archive.RecordsYears = "compliance", 30, 7
	shard := &components.EtcdCluster{Name: "entity-0", Endpoints: []string{"https://10.0.0.4:2379"}}
	a := components.ArbiterArgs{Coord: &components.EtcdCluster{Name: "coord", Endpoints: []string{"https://10.0.0.1:2379"}},
		Shards: []*components.EtcdCluster{shard}, Audit: &components.AuditStore{URL: "http://10.0.0.9:8123", Database: "lockplane"},
		Archive: &components.Archive{URL: "https://10.0.0.8:9000"}}
	files := components.ArbiterFiles{EtcdCert: "c", EtcdKey: "k", EtcdCA: "ca", Policies: "p", SPIFFESocket: "unix:///s",
		ArchiveCredentials: "ac", ArchiveCA: "aca", OperatorsCA: "oca"}
	parse(t, bins.Arbiter, "-h", arbiterUsage, arbiterBool, components.ArbiterFlags(s, "10.0.0.2", a, files))
	files.SPIFFESocket, files.SVID, files.SVIDKey, files.Bundle = "", "svid", "key", "bundle"
	parse(t, bins.Arbiter, "-h", arbiterUsage, arbiterBool, components.ArbiterFlags(s, "10.0.0.2", a, files))

	m := topology.Member{Name: "coord-1", Host: topology.Host{Name: "coord-1", Address: "10.0.0.1", Root: "/", DataDisk: "/var/lib/etcd"}}
	var etcdArgs []string
	for _, in := range components.EtcdFlags(s, "coord", pulumi.String("token"), []topology.Member{m}, m, components.EtcdFiles{Cert: "c", Key: "k", CA: "ca", TokenKey: "tk", TokenPublicKey: "tp"}) {
		v, ok := in.(pulumi.String)
		if !ok {
			t.Fatalf("etcd command line element %T: not a plain string", in)
		}
		etcdArgs = append(etcdArgs, string(v))
	}
	parse(t, bins.Etcd, "--help", etcdUsage, etcdBool, etcdArgs)
}
