package fanin_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"strings"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/fanin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// brokenEnv, set to "direct", dials each client straight to one arbiter
// in turn instead of through the control plane: the variant without key
// affinity, which this file's order test must fail on.
const brokenEnv = "LOCKPLANE_FANIN_BROKEN"

// TestWaitersForOneKeyAreGrantedInArrivalOrderAcrossArbiters: client
// processes, each with its own xDS client, queue for one key one after
// another; every release must grant the next in arrival order. Without
// key affinity the waiters queue on whichever arbiter they reached and
// each arbiter races the others for the key at a release.
func TestWaitersForOneKeyAreGrantedInArrivalOrderAcrossArbiters(t *testing.T) {
	// No fallback polls while the key is held: lockplane_waits_total then
	// counts queue joins only (a waiter's poll that finds the key held
	// counts again).
	r := startRegion(t, "--poll-interval", "1h")
	const key, waiters = "fanin/orders/1", 6
	target := func(i int) string {
		if os.Getenv(brokenEnv) == "direct" {
			return r.arbiters[i%len(r.arbiters)].Addr
		}
		return "xds:///" + fanin.DefaultName
	}
	clients := make([]*client, waiters+1)
	for i := range clients {
		clients[i] = r.startClient(fmt.Sprintf("client-%d", i), key, target(i))
	}
	clients[0].say(t, "lock")
	clients[0].expect(t, "granted")
	// Each waiter is sent once the one before it has joined a queue.
	for i := 1; i <= waiters; i++ {
		clients[i].say(t, "lock")
		deadline := time.Now().Add(30 * time.Second)
		for r.waits() < i {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d did not join a queue within 30s", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := r.waits(); got != i {
			t.Fatalf("%d queue joins after %d waiters", got, i)
		}
	}
	joined := r.waitsEach()
	var order []int
	holder := 0
	for range waiters {
		clients[holder].say(t, "release")
		clients[holder].expect(t, "released")
		next := granted(t, clients[1:]) + 1
		order = append(order, next)
		holder = next
	}
	clients[holder].say(t, "release")
	want := make([]int, waiters)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(order, want) {
		t.Fatalf("grants after each release went to waiters %v; arrival order is %v (queue joins per arbiter: %v)", order, want, joined)
	}
	if !slices.Contains(joined, waiters) {
		t.Fatalf("queue joins per arbiter %v: the waiters did not all queue on one", joined)
	}
	t.Logf("granted in arrival order: %v; queue joins per arbiter %v", order, joined)
}

// granted is the index of the next client to say "granted"; a client
// that has released and exited is skipped.
func granted(t *testing.T, clients []*client) int {
	t.Helper()
	deadline := time.After(time.Minute)
	done := make([]bool, len(clients))
	for {
		for i, c := range clients {
			if done[i] {
				continue
			}
			select {
			case line, ok := <-c.lines:
				if !ok {
					done[i] = true
					continue
				}
				if line != "granted" {
					t.Fatalf("client %d said %q, want granted", i, line)
				}
				return i
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatal("no waiter was granted within a minute of a release")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestRemovingAnArbiterMovesOnlyItsKeys: the ring keeps every key of the
// remaining arbiters where it was.
func TestRemovingAnArbiterMovesOnlyItsKeys(t *testing.T) {
	r := startRegion(t)
	api := r.routed("router")
	keys := make([]string, 150)
	for i := range keys {
		keys[i] = fmt.Sprintf("fanin/k/%d", i)
	}
	// where maps each key to the arbiter that answered an Inspect of it.
	where := func() map[string]string {
		out := map[string]string{}
		for _, k := range keys {
			addr, err := inspect(api, k)
			if err != nil {
				t.Fatalf("inspect %s: %v", k, err)
			}
			out[k] = addr
		}
		return out
	}
	before := where()
	share := map[string]int{}
	for _, a := range before {
		share[a]++
	}
	if len(share) != 3 {
		t.Fatalf("150 keys reached %d arbiters, want all 3: %v", len(share), share)
	}
	gone := r.arbiters[2].Addr
	if err := r.xds.SetArbiters(context.Background(), r.addrs()[:2]); err != nil {
		t.Fatal(err)
	}
	// The client moves off the removed arbiter once it has the new
	// endpoints, and settles once it also has the new ring size: the two
	// come as separate xDS updates (EDS, CDS), and between them a few keys
	// of the staying arbiters route to the other one (docs/fan-in.md). What
	// must hold is the settled ring: every key of a staying arbiter back
	// where it was.
	var after map[string]string
	var strays []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after = where()
		strays = strays[:0]
		for _, k := range keys {
			if before[k] != gone && after[k] != before[k] {
				strays = append(strays, fmt.Sprintf("%s moved from %s to %s", k, before[k], after[k]))
			}
		}
		if !slices.Contains(values(after), gone) && len(strays) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the arbiter was unpublished: keys still reach it: %v; keys whose arbiter stayed moved: %v",
				slices.Contains(values(after), gone), strays)
		}
	}
	moved := 0
	for _, k := range keys {
		if before[k] == gone {
			moved++
		}
	}
	t.Logf("shares before: %v; %d keys moved, all from the removed arbiter", share, moved)
}

func values(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestTheRateLimitRefusesNamingTheLimit: an identity past its call rate
// at an arbiter is refused RESOURCE_EXHAUSTED, RATE_LIMITED, with the
// limit in the message and the metadata; another identity is not.
func TestTheRateLimitRefusesNamingTheLimit(t *testing.T) {
	r := startRegion(t, "--call-rate", "2", "--call-burst", "3")
	busy, quiet := r.routed("busy"), r.routed("quiet")
	refused := 0
	start := time.Now()
	for range 10 {
		_, err := inspect(busy, "fanin/hot/1")
		if err == nil {
			continue
		}
		st := status.Convert(err)
		why, meta := reason.Info(err)
		if st.Code() != codes.ResourceExhausted || why != lockv1.ErrorReason_RATE_LIMITED {
			t.Fatalf("a call past the rate: %v, want RESOURCE_EXHAUSTED with RATE_LIMITED", err)
		}
		if !strings.Contains(st.Message(), "2 calls a second, bursts of 3") || meta["limit"] != "2" || meta["burst"] != "3" {
			t.Fatalf("the refusal does not name the limit: %q (metadata %v)", st.Message(), meta)
		}
		refused++
	}
	// Ten calls one after another against a burst of three at 2/s: over
	// the loop's time the bucket lets through at most 3 plus 2 a second
	// (about 30 ms here, so seven are refused).
	took := time.Since(start)
	if allowed := 3 + int(2*took.Seconds()); refused == 0 || refused < 10-allowed {
		t.Fatalf("%d of 10 calls in %v were refused; a burst of 3 at 2 a second allows %d", refused, took, allowed)
	}
	if _, err := inspect(quiet, "fanin/hot/1"); err != nil {
		t.Fatalf("another identity on the same arbiter: %v", err)
	}
	t.Logf("%d of 10 calls refused; the message: identity ... is over its rate at this arbiter: 2 calls a second, bursts of 3", refused)
}

// TestATrustedProxyNamesTheCallerAndNoOneElseCan: behind Envoy the
// arbiter's peer is Envoy; with --trusted-proxy-id it takes the caller
// from the certificate Envoy forwards, and ignores the header from any
// other peer.
func TestATrustedProxyNamesTheCallerAndNoOneElseCan(t *testing.T) {
	proxy := "spiffe://" + trustDomain + "/lockplane/envoy"
	r := startRegion(t, "--trusted-proxy-id", proxy)
	alice := "spiffe://" + trustDomain + "/ns/fanin/sa/alice"
	forwarded := metadata.Pairs("x-forwarded-client-cert", "Hash=0a1b;URI="+alice)
	open := func(api lockv1.LockServiceClient, md metadata.MD) (string, error) {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
		defer cancel()
		resp, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{})
		return resp.GetIdentity(), err
	}
	envoyConn := r.conn("envoy", "/lockplane/envoy", 0)
	envoy := lockv1.NewLockServiceClient(envoyConn)
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), forwarded), 10*time.Second)
	defer cancel()
	sess, err := envoy.OpenSession(ctx, &lockv1.OpenSessionRequest{})
	if err != nil || sess.GetIdentity() != alice {
		t.Fatalf("a session opened through the proxy for alice: %v, %v; want alice's", sess, err)
	}
	// A keepalive stream through the proxy is alice's too (the stream
	// interceptor); the same header from another workload is not.
	renew := func(api lockv1.LockServiceClient) *lockv1.KeepAliveResponse {
		ka, err := api.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: sess.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
		resp, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ka.CloseSend()
		return resp
	}
	if resp := renew(envoy); resp.GetTtl() == nil || resp.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Fatalf("alice's renewal through the proxy: %v", resp)
	}
	if resp := renew(r.direct("mallory-ka", "/ns/fanin/sa/mallory-ka", 0)); resp.GetError() != lockv1.ErrorReason_SESSION_NOT_OWNED {
		t.Fatalf("a workload renewing alice's session with her forwarded certificate: %v, want SESSION_NOT_OWNED", resp)
	}
	// Operators and the Admin API never go through the proxy.
	if _, err := adminv1.NewAdminServiceClient(envoyConn).Status(ctx, &adminv1.StatusRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an admin call through the proxy: %v, want PERMISSION_DENIED", err)
	}
	operator := metadata.Pairs("x-forwarded-client-cert", "Hash=0a1b;URI=spiffe://"+trustDomain+"/operator/alice")
	if _, err := open(envoy, operator); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the proxy forwarding an operator: %v, want UNAUTHENTICATED", err)
	}
	mallory := r.direct("mallory", "/ns/fanin/sa/mallory", 0)
	if id, err := open(mallory, forwarded); err != nil || id != "spiffe://"+trustDomain+"/ns/fanin/sa/mallory" {
		t.Fatalf("a workload forwarding alice's certificate itself: %q, %v; want its own identity", id, err)
	}
	for _, md := range []metadata.MD{nil, metadata.Pairs("x-forwarded-client-cert", "Hash=0a1b;URI=spiffe://elsewhere.test/ns/a/sa/b")} {
		if _, err := open(envoy, md); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("the proxy forwarding %v: %v, want UNAUTHENTICATED", md, err)
		}
	}
}
