package fanin

import (
	"context"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

var three = []string{"10.0.0.3:7443", "10.0.0.1:7443", "10.0.0.2:7443"}

func TestABadSpecIsRefusedNamingTheField(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Arbiters: three}, "name: is required"},
		{Spec{Name: "Lock", Arbiters: three}, "name: byte 0"},
		{Spec{Name: "lockplane"}, "arbiters: at least one"},
		{Spec{Name: "lockplane", Arbiters: []string{"10.0.0.1"}}, "arbiters[0]: \"10.0.0.1\" is not host:port"},
		{Spec{Name: "lockplane", Arbiters: []string{"10.0.0.1:0"}}, "arbiters[0]: \"10.0.0.1:0\": the port is not 1 to 65535"},
		{Spec{Name: "lockplane", Arbiters: []string{"10.0.0.1:1", "10.0.0.1:1"}}, "arbiters[1]: 10.0.0.1:1 is listed twice"},
		{Spec{Name: "lockplane", Arbiters: []string{"arbiter-1:7443"}}, "arbiters[0]: \"arbiter-1\" is not an IP address"},
		{Spec{Name: "lockplane", Arbiters: []string{"10.0.0.1:1", " 10.0.0.2:1"}}, "arbiters[1]: \" 10.0.0.2:1\" is not host:port"},
	} {
		_, err := c.spec.Resources()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
}

// Every resource passes the protos' own validation, and each arbiter has
// PointsPerArbiter points on the ring whatever their number.
func TestTheResourcesAreValidAndTheRingGrowsWithTheArbiters(t *testing.T) {
	for n := 1; n <= 3; n++ {
		res, err := Spec{Name: DefaultName, Arbiters: three[:n]}.Resources()
		if err != nil {
			t.Fatal(err)
		}
		for typ, list := range res {
			for _, r := range list {
				if v, ok := r.(interface{ ValidateAll() error }); !ok {
					t.Fatalf("%s: %T has no validation", typ, r)
				} else if err := v.ValidateAll(); err != nil {
					t.Fatalf("%s: %v", typ, err)
				}
			}
		}
		cl := res[resourcev3.ClusterType][0].(*clusterv3.Cluster)
		if got := cl.GetRingHashLbConfig().GetMinimumRingSize().GetValue(); got != uint64(n*PointsPerArbiter) {
			t.Fatalf("%d arbiters: a ring of %d, want %d", n, got, n*PointsPerArbiter)
		}
	}
}

func TestArbitersAreRepublishedAndABadSetKept(t *testing.T) {
	s, err := New(context.Background(), Spec{Name: DefaultName, Arbiters: three}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetArbiters(context.Background(), []string{"nope"}); err == nil {
		t.Fatal("an invalid arbiter set was published")
	}
	if got, v := s.Arbiters(); len(got) != 3 || v != 1 {
		t.Fatalf("after a refused set: %v at version %d, want the three at 1", got, v)
	}
	if err := s.SetArbiters(context.Background(), three[:2]); err != nil {
		t.Fatal(err)
	}
	if got, v := s.Arbiters(); len(got) != 2 || v != 2 {
		t.Fatalf("%v at version %d, want two at 2", got, v)
	}
}

func envoyConfig() EnvoyConfig {
	return EnvoyConfig{Listen: "0.0.0.0:7443", ControlPlane: "fanin.lockplane.internal:7444",
		ControlPlaneID: "spiffe://example.org/lockplane/fanin", ArbiterID: "spiffe://example.org/lockplane/arbiter",
		SPIRESocket: "/run/spire/agent.sock", CallRate: 100, CallBurst: 200}
}

func TestTheEnvoyBootstrapIsValidAndItsValidationCanFail(t *testing.T) {
	spec := Spec{Name: DefaultName, Arbiters: three}
	b, err := spec.Envoy(envoyConfig())
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"headerName":"x-lock-key"`, `"lbPolicy":"RING_HASH"`, `"rateLimitedAsResourceExhausted":true`, `"path":"/run/spire/agent.sock"`, `"timeout":"0s"`, `"idleTimeout":"0s"`, `"streamIdleTimeout":"0s"`, `"grpcTimeoutHeaderMax":"0s"`,
		`"prefix":"/lockplane.lock.v1.LockService/"`, `(Acquire|OpenSession|Inspect)$`, `"maxRequests":1048576`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("the bootstrap has no %s", want)
		}
	}
	// The validation is the protos', and it refuses what Envoy would.
	b.StaticResources.Clusters[0].ConnectTimeout = durationpb.New(-time.Second)
	if err := b.ValidateAll(); err == nil {
		t.Fatal("a negative connect timeout passed validation")
	}
	bad := envoyConfig()
	bad.ArbiterID = "arbiter"
	if _, err := spec.Envoy(bad); err == nil || !strings.Contains(err.Error(), "arbiter_id") {
		t.Fatalf("a bad arbiter ID: %v, want an error naming arbiter_id", err)
	}
	bad = envoyConfig()
	bad.CallRate = 0
	if _, err := spec.Envoy(bad); err == nil || !strings.Contains(err.Error(), "call_burst") {
		t.Fatalf("a burst without a rate: %v", err)
	}
}
