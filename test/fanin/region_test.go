package fanin_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devca"
	"github.com/lockplane/lockplane/services/fanin"
	"github.com/lockplane/lockplane/test/arbiterproc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"
)

const trustDomain = "fanin.lockplane.test"

// region is three arbiters on one etcd cluster and the control plane
// that publishes them.
type region struct {
	t        *testing.T
	dir      string
	ca       *devca.CA
	bundle   string
	arbiters []arbiterproc.Proc
	xds      *fanin.Server
	// xdsAddr is the control plane as its certificate names it.
	xdsAddr string
}

// startRegion starts the region; extra are flags every arbiter gets.
func startRegion(t *testing.T, extra ...string) *region {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &region{t: t, dir: t.TempDir()}
	endpoints := bins.StartEtcd(t, ctx, filepath.Join(r.dir, "etcd"))
	var err error
	if r.ca, err = devca.New(trustDomain, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r.bundle, err = r.ca.WriteBundle(filepath.Join(r.dir, "pki")); err != nil {
		t.Fatal(err)
	}
	arbiter := r.svid("arbiter", "/arbiter")
	for i := range 3 {
		r.arbiters = append(r.arbiters, bins.Start(t, ctx, filepath.Join(r.dir, fmt.Sprintf("arbiter-%d.log", i)), append([]string{
			"--etcd-endpoints", strings.Join(endpoints, ","), "--svid-cert", arbiter.Cert, "--svid-key", arbiter.Key,
			"--bundle", arbiter.Bundle, "--trust-domain", arbiter.TrustDomain, "--allow-any-workload", "--etcd-without-auth"}, extra...)...))
	}
	// The control plane, as lockplane-fanin serves it.
	src, err := identity.FromFiles(r.svid("fanin", "/fanin"))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := identity.ServerCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	xctx, stop := context.WithCancel(context.Background())
	if r.xds, err = fanin.New(xctx, fanin.Spec{Name: fanin.DefaultName, Arbiters: r.addrs()}, nil); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	r.xds.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Stop(); stop() })
	r.xdsAddr = fmt.Sprintf("localhost:%d", lis.Addr().(*net.TCPAddr).Port)
	return r
}

// svid writes an SVID of path under name and returns its files.
func (r *region) svid(name, path string) identity.Files {
	f, err := r.ca.WriteSVID(filepath.Join(r.dir, "pki", name), path, time.Hour)
	if err != nil {
		r.t.Fatal(err)
	}
	f.Bundle = r.bundle
	return f
}

func (r *region) addrs() []string {
	var out []string
	for _, a := range r.arbiters {
		out = append(out, a.Addr)
	}
	return out
}

// waits is lockplane_waits_total summed over the arbiters: how many
// Acquires have joined a key's queue (and, where waiters poll, how many
// polls found the key held).
func (r *region) waits() int {
	total := 0
	for _, n := range r.waitsEach() {
		total += n
	}
	return total
}

// waitsEach is lockplane_waits_total of each arbiter.
func (r *region) waitsEach() []int {
	var out []int
	for _, a := range r.arbiters {
		out = append(out, counter(r.t, a.Metrics, "lockplane_waits_total"))
	}
	return out
}

func counter(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += int(v)
	}
	return total
}

// client is a client process (TestMain's child).
type client struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// startClient starts a client process of identity name locking key
// through target; with an xds:/// target its bootstrap names the control
// plane.
func (r *region) startClient(name, key, target string) *client {
	t := r.t
	id := r.svid(name, "/ns/fanin/sa/"+name)
	boot, err := fanin.ClientBootstrap(r.xdsAddr, "fanin-test-"+name, fanin.ClientTLS{Cert: id.Cert, Key: id.Key, Bundle: id.Bundle})
	if err != nil {
		t.Fatal(err)
	}
	bootPath := filepath.Join(r.dir, name+"-xds-bootstrap.json")
	if err := os.WriteFile(bootPath, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &client{name: name, cmd: exec.Command(os.Args[0]), lines: make(chan string, 8)}
	c.cmd.Env = append(os.Environ(), childEnv+"=1", "GRPC_XDS_BOOTSTRAP="+bootPath,
		childTarget+"="+target, childKey+"="+key, childCert+"="+id.Cert, childPKey+"="+id.Key,
		childBundle+"="+id.Bundle, childDomain+"="+id.TrustDomain, childServer+"=spiffe://"+trustDomain+"/arbiter")
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.in.Close(); c.cmd.Process.Kill(); c.cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	c.expect(t, "open")
	return c
}

// expect waits for the client's next line to be want.
func (c *client) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-c.lines:
		if !ok || got != want {
			t.Fatalf("client %s: got %q (open %v), want %q", c.name, got, ok, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("client %s: no %q within a minute", c.name, want)
	}
}

func (c *client) say(t *testing.T, line string) {
	t.Helper()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		t.Fatalf("client %s: %v", c.name, err)
	}
}

// routed is a raw lock.v1 client of the named identity that routes
// through the control plane (the bootstrap given in-process, not by
// GRPC_XDS_BOOTSTRAP).
func (r *region) routed(name string) lockv1.LockServiceClient {
	t := r.t
	id := r.svid(name, "/ns/fanin/sa/"+name)
	boot, err := fanin.ClientBootstrap(r.xdsAddr, "fanin-test-"+name, fanin.ClientTLS{Cert: id.Cert, Key: id.Key, Bundle: id.Bundle})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := xds.NewXDSResolverWithConfigForTesting(boot)
	if err != nil {
		t.Fatal(err)
	}
	src, err := identity.FromFiles(id)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := identity.ClientCredentials(src, "spiffe://"+trustDomain+"/arbiter")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+fanin.DefaultName, grpc.WithTransportCredentials(creds), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lockv1.NewLockServiceClient(conn)
}

// inspect asks about key with its routing header, and returns the
// arbiter that answered.
func inspect(api lockv1.LockServiceClient, key string) (string, error) {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), lockclient.KeyHeader, key), 10*time.Second)
	defer cancel()
	var p peer.Peer
	_, err := api.Inspect(ctx, &lockv1.InspectRequest{Key: key}, grpc.Peer(&p))
	if p.Addr == nil {
		return "", err
	}
	return p.Addr.String(), err
}

// direct is a raw lock.v1 client of the named identity (SVID path) to
// arbiter i, without the control plane.
func (r *region) direct(name, path string, i int) lockv1.LockServiceClient {
	return lockv1.NewLockServiceClient(r.conn(name, path, i))
}

// conn is a connection of the named identity (SVID path) to arbiter i.
func (r *region) conn(name, path string, i int) *grpc.ClientConn {
	t := r.t
	src, err := identity.FromFiles(r.svid(name, path))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := identity.ClientCredentials(src, "spiffe://"+trustDomain+"/arbiter")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(r.arbiters[i].Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
