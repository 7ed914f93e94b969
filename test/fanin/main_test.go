// Package fanin_test runs the fan-in tier as a region would: three
// arbiter processes on one etcd cluster, the xDS control plane, and
// clients that route proxyless through it (xds:///lockplane), each a
// process of its own.
package fanin_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/test/arbiterproc"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver and ring_hash
)

// bins are the arbiter and etcd built for this run.
var bins arbiterproc.Bins

// TestMain builds the arbiter, and doubles as a client process.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "fanin-bin-")
	if err != nil {
		panic(err)
	}
	if bins, err = arbiterproc.Build(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The child's settings, passed in its environment.
const (
	childEnv    = "LOCKPLANE_FANIN_CHILD"
	childTarget = "LOCKPLANE_FANIN_TARGET"
	childKey    = "LOCKPLANE_FANIN_KEY"
	childCert   = "LOCKPLANE_FANIN_CERT"
	childPKey   = "LOCKPLANE_FANIN_PKEY"
	childBundle = "LOCKPLANE_FANIN_BUNDLE"
	childDomain = "LOCKPLANE_FANIN_DOMAIN"
	childServer = "LOCKPLANE_FANIN_SERVER"
)

// child is a client process: it locks the key (waiting), prints
// "granted", and releases when a line arrives on stdin, printing
// "released". Its xDS bootstrap comes from GRPC_XDS_BOOTSTRAP, as a
// workload's would.
func child() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := identity.FromFiles(identity.Files{Cert: os.Getenv(childCert), Key: os.Getenv(childPKey),
		Bundle: os.Getenv(childBundle), TrustDomain: os.Getenv(childDomain)})
	if err != nil {
		return err
	}
	c, err := lockclient.Dial(lockclient.Config{Target: os.Getenv(childTarget), Identity: src, ServerID: os.Getenv(childServer)})
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	s, err := c.Session(ctx, "")
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	fmt.Println("open")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() { // "lock"
		return nil
	}
	h, err := s.Lock(ctx, os.Getenv(childKey), func(*lockclient.Hold) {})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	fmt.Println("granted")
	if !in.Scan() { // "release"
		return nil
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	fmt.Println("released")
	return nil
}
