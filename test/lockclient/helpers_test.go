package lockclient_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/lockkey"
	"google.golang.org/grpc"
)

func noFence(*lockclient.Hold) {}

// dialWith dials env as the named identity with a unary interceptor,
// closed with the test.
func dialWith(t *testing.T, env *devenv.Env, name string, icpt grpc.UnaryClientInterceptor) *lockclient.Client {
	t.Helper()
	return dialOpts(t, env, name, grpc.WithUnaryInterceptor(icpt))
}

// dialOpts dials env as the named identity with dial options, closed with
// the test.
func dialOpts(t *testing.T, env *devenv.Env, name string, opts ...grpc.DialOption) *lockclient.Client {
	t.Helper()
	src, err := env.Profile.Source(name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lockclient.Dial(lockclient.Config{Target: env.Addr, Identity: src, ServerID: env.Profile.ServerID,
		DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// methodName is the last element of a gRPC method, "Acquire".
func methodName(method string) string { return method[strings.LastIndex(method, "/")+1:] }

// holdOf reads key's hold from etcd: its lease and mod revision, zero
// when the key is free.
func holdOf(t *testing.T, env *devenv.Env, key string) (lease, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0
	}
	return resp.Kvs[0].Lease, resp.Kvs[0].ModRevision
}

// gate holds back the next call of one method once armed: it closes
// reached when the call arrives (once answered, if after is set) and lets
// it go on at release, or when the call's ctx ends. The test's end
// releases it, so a test failing while the call is held never hangs.
type gate struct {
	method        string
	after         bool
	armed         atomic.Bool
	reached, open chan struct{}
	once          sync.Once
}

func newGate(t *testing.T, method string, after bool) *gate {
	g := &gate{method: method, after: after, reached: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

// release lets the held call go on; later calls are no-ops.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if methodName(method) != g.method || !g.armed.CompareAndSwap(true, false) {
		return inv(ctx, method, req, reply, cc, opts...)
	}
	var err error
	if g.after {
		err = inv(ctx, method, req, reply, cc, opts...)
	}
	close(g.reached)
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !g.after {
		err = inv(ctx, method, req, reply, cc, opts...)
	}
	return err
}
