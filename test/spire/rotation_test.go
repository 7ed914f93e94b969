package spire_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/lockplane/lockplane/services/spire"
	"github.com/lockplane/lockplane/services/spire/spiretest"
	"github.com/lockplane/lockplane/test/gate/faultproxy"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

const (
	trustDomain = "spire.lockplane.test"
	arbiterID   = "spiffe://" + trustDomain + "/lockplane/arbiter"
	workerID    = "spiffe://" + trustDomain + "/ns/rot/sa/worker"
	// otherID is a second identity the test process also matches: the
	// client asks for workerID's SVID by name.
	otherID = "spiffe://" + trustDomain + "/ns/rot/sa/other"
	// svidTTL is short enough for several rotations in one session: an
	// agent replaces an SVID once half its life has passed.
	svidTTL = 20 * time.Second
	// rotations is how many new SVIDs each side must get, the last ones
	// issued after the first ones expired.
	rotations = 3
	// brokenEnv makes the client keep the first SVID it was given (as a
	// client that read its certificate once would): the test must fail.
	brokenEnv = "LOCKPLANE_SPIRE_BROKEN"
)

// TestASessionOutlivesItsSVIDs holds a lock while SPIRE rotates the
// arbiter's and the client's SVIDs several times, past the expiry of the
// first ones. After each of the client's rotations every connection is
// cut, so the next keepalive and call reconnect with the SVIDs of that
// moment. The session, its hold and its token must come through.
func TestASessionOutlivesItsSVIDs(t *testing.T) {
	sp := spiretest.StartSPIRE(t, trustDomain)
	dir := t.TempDir()

	// The worker's entry comes from its grant, as `lockplane up` derives
	// it; the arbiter's is a service entry on its host.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	policies := filepath.Join(dir, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	grant := fmt.Sprintf(`apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: rot-worker}
spec:
  spiffeId: %s
  prefixes: [rot/]
  workload:
    selectors: ["unix:path:%s"]
---
apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: rot-other}
spec:
  spiffeId: %s
  prefixes: [other/]
  workload:
    selectors: ["unix:path:%s"]
`, workerID, self, otherID, self)
	if err := os.WriteFile(filepath.Join(policies, "grants.yaml"), []byte(grant), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(policies, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := spire.FromGrants(set.Grants, []string{sp.AgentID}, svidTTL)
	if err != nil {
		t.Fatal(err)
	}
	arb, err := spire.NewEntry(arbiterID, sp.AgentID, []string{"unix:path:" + bins.Arbiter}, svidTTL)
	if err != nil {
		t.Fatal(err)
	}
	if rep := sp.Register(t, append(entries, arb)); len(rep.Created) != 3 {
		t.Fatalf("registered %d entries, want the worker's, the other's and the arbiter's: %+v", len(rep.Created), rep)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	endpoints := bins.StartEtcd(t, ctx, filepath.Join(dir, "etcd"))
	addr := bins.Start(t, ctx, filepath.Join(dir, "arbiter.log"), "--etcd-endpoints", endpoints[0], "--spiffe-socket", sp.AgentSocket,
		"--spiffe-id", arbiterID, "--policies", policies, "--etcd-without-auth").Addr

	src, err := identity.FromWorkloadAPIAs(ctx, sp.AgentSocket, workerID)
	if err != nil {
		t.Fatal(err)
	}
	// An ID the agent does not issue this process is refused, not
	// replaced by one it does.
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	if absent, err := identity.FromWorkloadAPIAs(actx, sp.AgentSocket, "spiffe://"+trustDomain+"/ns/rot/sa/absent"); err == nil {
		id, _ := identity.ID(absent)
		t.Fatalf("asked for an ID the agent does not issue, got %s", id)
	}
	acancel()
	defer src.Close()
	watch := src.(*workloadapi.X509Source)
	first, err := watch.GetX509SVID()
	if err != nil {
		t.Fatal(err)
	}
	if first.ID.String() != workerID {
		t.Fatalf("the agent gave the test %s, want %s", first.ID, workerID)
	}
	var use identity.Source = src
	if os.Getenv(brokenEnv) == "static" {
		use = snapshot(t, watch)
	}

	proxy, err := faultproxy.New("127.0.0.1:0", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	c, err := lockclient.Dial(lockclient.Config{Target: proxy.Addr(), Identity: use, ServerID: arbiterID})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	s, err := c.Session(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	const key = "rot/ledger"
	h, err := s.Lock(ctx, key, func(*lockclient.Hold) {}) // fencing is watched on h.Fenced()
	if err != nil {
		t.Fatal(err)
	}
	token := h.Token()
	firstArbiter := serverCert(t, addr, src)

	clientSeen, arbiterSeen := map[string]bool{serial(first.Certificates[0]): true}, map[string]bool{serial(firstArbiter): true}
	last := first.Certificates[0]
	var arbiterNow *x509.Certificate
	for done := false; !done; {
		select {
		case <-watch.Updated():
		case <-h.Fenced():
			t.Fatalf("the hold was fenced after %d client SVIDs: its session lost its keepalives", len(clientSeen))
		case <-ctx.Done():
			t.Fatalf("rotations did not come: %d client SVIDs, %d arbiter SVIDs seen", len(clientSeen), len(arbiterSeen))
		}
		cur, err := watch.GetX509SVID()
		if err != nil {
			t.Fatal(err)
		}
		if cur.Certificates[0].Equal(last) {
			continue // a bundle update
		}
		last = cur.Certificates[0]
		clientSeen[serial(last)] = true

		// Cut every connection: the keepalive stream and the next call
		// reconnect, each side presenting the SVID it has now.
		proxy.Set(faultproxy.Any, faultproxy.Fault{Drop: true})
		proxy.Heal()
		resp, err := inspect(ctx, c, key)
		if err != nil {
			t.Fatalf("after the client's SVID %d (the first expired %s ago): %v", len(clientSeen), time.Since(first.Certificates[0].NotAfter).Round(time.Second), err)
		}
		if !resp.Held || resp.Holder.GetSessionId() != s.ID() {
			t.Fatalf("after the client's SVID %d, %s is no longer held by the session: %v", len(clientSeen), key, resp)
		}
		arbiterNow = serverCert(t, addr, src)
		arbiterSeen[serial(arbiterNow)] = true
		t.Logf("client SVID %d (expires in %s), arbiter SVID %d: %s still held by session %x",
			len(clientSeen), time.Until(last.NotAfter).Round(time.Second), len(arbiterSeen), key, s.ID())
		done = len(clientSeen) > rotations && len(arbiterSeen) > rotations &&
			last.NotBefore.After(first.Certificates[0].NotAfter) && arbiterNow.NotBefore.After(firstArbiter.NotAfter)
	}
	// The last cut failed a keepalive, which stops new work until the
	// next one succeeds (ADR-12); the lockclient exposes no event for it,
	// so it is polled, for at most one TTL.
	for end := time.Now().Add(s.TTL()); !h.CanStart() || !s.CanStart(); {
		if time.Now().After(end) {
			t.Fatalf("after the rotations no keepalive succeeded within the session's TTL (hold %v, session %v)", h.CanStart(), s.CanStart())
		}
		select {
		case <-h.Fenced():
			t.Fatal("the hold was fenced after the rotations")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if h.Token() != token {
		t.Fatal("the hold's token changed")
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("release after %d client and %d arbiter SVIDs: %v", len(clientSeen), len(arbiterSeen), err)
	}
}

// inspect asks who holds key. A call that the cut closed under it fails
// UNAVAILABLE, as it would for any client: it is asked again once the
// channel is ready, within a bound. A channel that cannot become ready
// (a handshake refused) fails at the bound.
func inspect(ctx context.Context, c *lockclient.Client, key string) (*lockv1.InspectResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		resp, err := c.Inspect(ctx, key)
		if status.Code(err) != codes.Unavailable {
			return resp, err
		}
		conn := c.Conn()
		conn.Connect()
		for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
			if !conn.WaitForStateChange(ctx, st) {
				return nil, fmt.Errorf("%w; the channel is still %s", err, st)
			}
		}
	}
}

// serverCert is the SVID the arbiter presents to a new connection now.
func serverCert(t *testing.T, addr string, src identity.Source) *x509.Certificate {
	t.Helper()
	cfg := tlsconfig.MTLSClientConfig(src, src, tlsconfig.AuthorizeID(spiffeid.RequireFromString(arbiterID)))
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("a TLS connection to the arbiter: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// static is an SVID and bundle read once: the broken variant.
type static struct {
	*x509svid.SVID
	*x509bundle.Bundle
}

func (static) Close() error { return nil }

func snapshot(t *testing.T, src *workloadapi.X509Source) identity.Source {
	svid, err := src.GetX509SVID()
	if err != nil {
		t.Fatal(err)
	}
	b, err := src.GetX509BundleForTrustDomain(svid.ID.TrustDomain())
	if err != nil {
		t.Fatal(err)
	}
	return static{svid, b}
}
