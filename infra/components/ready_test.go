package components

import (
	"slices"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/topology"
)

func readyStack() *topology.Stack {
	s := &topology.Stack{Region: "us-east", TrustDomain: "us-east.lockplane.test"}
	s.Arbiter.Port, s.Arbiter.FanInPort = 7443, 7444
	s.Etcd.ClientPort, s.Etcd.PeerPort = 2379, 2380
	s.Audit.HTTPPort = 8123
	return s
}

// An arbiter's check is the arbiter binary's own probe, with the SVID
// it serves with; a DR stack's passes sealed too.
func TestArbiterReadyIsItsOwnProbeAndSealedOKOnlyInADRStack(t *testing.T) {
	s := readyStack()
	env := &Env{Stack: s}
	h := topology.Host{Name: "arbiter-1", Address: "10.231.0.21", Root: "/"}
	spire := ArbiterFiles{SPIFFESocket: "unix:///run/spire/agent/public/api.sock"}
	cmd := ArbiterReady(env, h, spire).Command
	want := []string{"/opt/lockplane/bin/arbiter", "probe", "--addr", "10.231.0.21:7443", "--spiffe-socket", spire.SPIFFESocket,
		"--spiffe-id", "spiffe://us-east.lockplane.test" + ArbiterServerID, "--trust-domain", "us-east.lockplane.test"}
	if !slices.Equal(cmd, want) {
		t.Fatalf("arbiter check %q, want %q", cmd, want)
	}
	s.Restore.StoreStack = "local-snapshots"
	if cmd := ArbiterReady(env, h, spire).Command; cmd[len(cmd)-1] != "--sealed-ok" {
		t.Fatalf("a DR stack's arbiter check %q: no --sealed-ok", cmd)
	}
	files := ArbiterFiles{SVID: "/etc/lockplane/arbiter/svid.crt", SVIDKey: "/etc/lockplane/arbiter/svid.key", Bundle: "/etc/lockplane/arbiter/bundle.crt"}
	if cmd := strings.Join(ArbiterReady(env, h, files).Command, " "); !strings.Contains(cmd, "--svid-cert "+files.SVID+" --svid-key "+files.SVIDKey+" --bundle "+files.Bundle) {
		t.Fatalf("arbiter check with SVID files: %s", cmd)
	}
}

// Each check runs on the service's host, against the address it serves
// on, with the files that service has there.
func TestEveryCheckProbesTheServicesOwnAddress(t *testing.T) {
	env := &Env{Stack: readyStack()}
	h := topology.Host{Name: "n1", Address: "10.231.0.11", Root: "/srv/n1"}
	f := etcdFiles(env, h, "coord")
	for name, tc := range map[string]struct {
		cmd  []string
		want string
	}{
		"etcd":         {EtcdReady(env, h, f).Command, "/srv/n1/opt/lockplane/bin/lockplane-node probe tcp 10.231.0.11:2380"},
		"minio":        {MinIOReady(env, h, 9000, "/ca.crt").Command, "/srv/n1/opt/lockplane/bin/lockplane-node probe http https://10.231.0.11:9000/minio/health/cluster --ca /ca.crt"},
		"clickhouse":   {ClickHouseReady(env, h).Command, "/srv/n1/opt/lockplane/bin/lockplane-node probe http http://10.231.0.11:8123/ping"},
		"fan-in":       {FanInReady(env, h).Command, "/srv/n1/opt/lockplane/bin/lockplane-node probe tcp 10.231.0.11:7444"},
		"spire-server": {SpireServerReady(env, h, "/srv/n1/run/spire/server/api.sock").Command, "/srv/n1/opt/lockplane/bin/spire-server healthcheck -socketPath /srv/n1/run/spire/server/api.sock"},
		"spire-agent":  {SpireAgentReady(env, h, "/srv/n1/run/spire/agent/public/api.sock").Command, "/srv/n1/opt/lockplane/bin/spire-agent healthcheck -socketPath /srv/n1/run/spire/agent/public/api.sock"},
	} {
		if got := strings.Join(tc.cmd, " "); got != tc.want {
			t.Errorf("%s check:\n got %s\nwant %s", name, got, tc.want)
		}
	}
}

// A check that dials an address also requires the service itself to
// hold its listeners (a local user's squatter would answer the dial), and
// a restarted etcd member must serve its own data, not merely listen.
func TestChecksOwnTheirAddressesAndARestartedMemberServes(t *testing.T) {
	env := &Env{Stack: readyStack()}
	h := topology.Host{Name: "n1", Address: "10.231.0.11", Root: "/srv/n1"}
	for name, tc := range map[string]struct {
		listens []string
		want    string
	}{
		"etcd":       {EtcdReady(env, h, etcdFiles(env, h, "coord")).Listens, "10.231.0.11:2380 10.231.0.11:2381"},
		"minio":      {MinIOReady(env, h, 9000, "/ca.crt").Listens, "10.231.0.11:9000"},
		"clickhouse": {ClickHouseReady(env, h).Listens, "10.231.0.11:8123"},
		"fan-in":     {FanInReady(env, h).Listens, "10.231.0.11:7444"},
		"arbiter":    {ArbiterReady(env, h, ArbiterFiles{SPIFFESocket: "unix:///s"}).Listens, "10.231.0.11:7443"},
	} {
		if got := strings.Join(tc.listens, " "); got != tc.want {
			t.Errorf("%s check owns %q, want %q", name, got, tc.want)
		}
	}
	up := strings.Join(EtcdReady(env, h, etcdFiles(env, h, "coord")).UpdateCommand, " ")
	if want := "/srv/n1/opt/lockplane/bin/lockplane-node probe http http://10.231.0.11:2381/readyz?exclude=linearizable_read"; up != want {
		t.Errorf("a restarted member's check:\n got %s\nwant %s", up, want)
	}
}
