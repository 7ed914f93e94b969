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

	"github.com/lockplane/lockplane/test/arbiterproc"
	"github.com/lockplane/lockplane/test/procflags"
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
	// Go's flag usage: "  -name type" ("  -name" alone for a bool).
	parse(t, bins.Arbiter, "-h", regexp.MustCompile(`(?m)^  -([a-z0-9-]+)( \S+)?$`), func(m []string) bool { return m[2] == "" }, arbiter.Args())
	// etcd's: "  --name 'default'", a bool's default 'true' or 'false'.
	parse(t, bins.Etcd, "--help", regexp.MustCompile(`(?m)^  --([a-z0-9-]+)( '[^']*')?$`), func(m []string) bool {
		return m[2] == " 'true'" || m[2] == " 'false'"
	}, etcd.Args())
}

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
