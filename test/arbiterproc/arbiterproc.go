// Package arbiterproc runs the arbiter binary as a separate process for tests.
//
// Tests that need several arbiters, or an arbiter whose identity comes
// from a SPIRE agent by its binary's path, use it: built once per test
// binary, on a one-member etcd cluster whose epoch is bootstrapped.
package arbiterproc

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/cluster"
	"github.com/lockplane/lockplane/test/procflags"
)

// Bins are the arbiter and etcd built for a test binary.
type Bins struct {
	Arbiter, Etcd string
}

// Build builds both into dir.
func Build(dir string) (Bins, error) {
	b := Bins{Arbiter: filepath.Join(dir, "arbiter")}
	if out, err := exec.Command("go", "build", "-o", b.Arbiter, "github.com/lockplane/lockplane/services/cmd/arbiter").CombinedOutput(); err != nil {
		return b, fmt.Errorf("build the arbiter: %v\n%s", err, out)
	}
	var err error
	b.Etcd, err = cluster.BuildEtcd(dir)
	return b, err
}

// StartEtcd starts a one-member cluster under dir with the region's epochs
// bootstrapped, stopped when the test ends, and returns its endpoints.
func (b Bins) StartEtcd(t testing.TB, ctx context.Context, dir string) []string {
	t.Helper()
	etcd, err := cluster.Start(ctx, cluster.Config{Bin: b.Etcd, Dir: dir, Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := epoch.BootstrapRegion(ctx, cli, "coord", nil, 0); err != nil {
		t.Fatal(err)
	}
	return etcd.Endpoints()
}

// Proc is a running arbiter.
type Proc struct {
	// Addr is its gRPC address, Metrics its /metrics one.
	Addr, Metrics string
}

// Start runs the arbiter with args (besides --listen and
// --metrics-listen, on free loopback ports), logging to logPath, and
// returns once it listens. It is killed when the test ends; its log is
// printed if the test failed.
func (b Bins) Start(t testing.TB, ctx context.Context, logPath string, args ...string) Proc {
	t.Helper()
	return b.StartFlags(t, ctx, logPath, procflags.Arbiter{Extra: args})
}

// StartFlags is Start with the command line f: its Listen and
// MetricsListen are overwritten with free loopback ports.
func (b Bins) StartFlags(t testing.TB, ctx context.Context, logPath string, f procflags.Arbiter) Proc {
	t.Helper()
	ports, err := resourcetest.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	p := Proc{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Metrics: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	f.Listen, f.MetricsListen = p.Addr, p.Metrics
	proc := resourcetest.StartLogged(t, exec.Command(b.Arbiter, f.Args()...), logPath)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if c, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.Addr); err == nil {
			c.Close()
			return p
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the arbiter did not listen on %s", p.Addr)
		case <-proc.Done(): // a bad flag, say: no need to wait out the bound
			t.Fatalf("the arbiter exited (%v) before it listened on %s; see %s", proc.ProcessState(), p.Addr, logPath)
		case <-time.After(50 * time.Millisecond): // polled: no event for a port opening
		}
	}
}
