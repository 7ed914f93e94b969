// Package fanin is the key-affine fan-in tier (ADR-14, ADR-18): an xDS
// control plane that publishes a region's arbiters with ring-hash routing
// on the lock key. Every client that routes through it, gRPC's own xDS
// client (proxyless) or Envoy, sends the calls of one key to one arbiter,
// so that arbiter sees every waiter for the key and grants them in
// arrival order. Removing an arbiter moves only the keys that hashed to
// it; their waiters retry on the arbiter the ring gives them next.
package fanin

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/lockplane/lockplane/services/client/protocol"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// DefaultName is the service name clients dial as xds:///lockplane.
const DefaultName = "lockplane"

// PointsPerArbiter is how many points each arbiter has on the ring. The
// ring is sized to it times the arbiters, so an arbiter keeps its points
// when another is added or removed and only the keys of the one that
// changed move (a ring of fixed size would hand every arbiter new points
// and move keys between arbiters that stayed). 256 points keep each
// arbiter's share within a few percent of the mean.
const PointsPerArbiter = 256

// MaxRingSize is gRPC's cap on a ring (GRPC_RING_HASH_CAP): past 16
// arbiters each has fewer points, and a change of membership moves a few
// percent more keys than its own share.
const MaxRingSize = 4096

// Spec is what the control plane publishes.
type Spec struct {
	// Name is the service's xDS name: the listener clients dial
	// (xds:///Name), its route and its cluster.
	Name string
	// Arbiters are the arbiters' gRPC addresses, host:port.
	Arbiters []string
}

// Validate names the field and the rule a spec breaks.
func (s Spec) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("name: is required")
	}
	for i := 0; i < len(s.Name); i++ {
		c := s.Name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("name: byte %d (%q) is not a lower-case letter, digit, '-' or '.'", i, c)
		}
	}
	if len(s.Arbiters) == 0 {
		return fmt.Errorf("arbiters: at least one is required")
	}
	seen := map[string]bool{}
	for i, a := range s.Arbiters {
		host, _, err := splitAddr(a)
		if err != nil {
			return fmt.Errorf("arbiters[%d]: %w", i, err)
		}
		// Envoy takes an endpoint's address as given, not as a name to
		// resolve; gRPC would resolve it, and the two would disagree.
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("arbiters[%d]: %q is not an IP address: endpoints are published as addresses, never names", i, host)
		}
		if seen[a] {
			return fmt.Errorf("arbiters[%d]: %s is listed twice", i, a)
		}
		seen[a] = true
	}
	return nil
}

func splitAddr(a string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || strings.TrimSpace(host) != host {
		return "", 0, fmt.Errorf("%q is not host:port", a)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("%q: the port is not 1 to 65535", a)
	}
	return host, uint32(p), nil
}

// Resources are the spec's xDS resources by type: a listener for gRPC
// clients (an API listener: gRPC has no sockets to configure), a cluster
// balanced by ring hash, and its endpoints. The route hashes KeyHeader.
func (s Spec) Resources() (map[resourcev3.Type][]types.Resource, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	l, err := s.apiListener()
	if err != nil {
		return nil, err
	}
	return map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {l},
		resourcev3.ClusterType:  {s.cluster()},
		resourcev3.EndpointType: {s.endpoints()},
	}, nil
}

// ads is the config source of every resource a listener or cluster
// names: the one aggregated stream the client already has.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// route sends every lock.v1 call to the arbiters' cluster, choosing the
// arbiter by a hash of the key. A call without the header (a keepalive,
// an open) goes to an arbiter chosen at random.
func (s Spec) route() *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: s.Name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    s.Name,
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: s.Name},
					HashPolicy: []*routev3.RouteAction_HashPolicy{{
						PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
							Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: protocol.KeyHeader},
						},
					}},
				}},
			}},
		}},
	}
}

// connectionManager is the HTTP connection manager of a listener: the
// route inline, and the router filter, which gRPC requires last.
func (s Spec) connectionManager() (*hcmv3.HttpConnectionManager, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpConnectionManager{
		StatPrefix:     s.Name,
		CodecType:      hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: s.route()},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	}, nil
}

func (s Spec) apiListener() (*listenerv3.Listener, error) {
	hcm, err := s.connectionManager()
	if err != nil {
		return nil, err
	}
	a, err := anypb.New(hcm)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{Name: s.Name, ApiListener: &listenerv3.ApiListener{ApiListener: a}}, nil
}

// cluster balances by ring hash over endpoints sent on the ADS stream.
// xxHash is the one hash function gRPC's ring hash implements.
func (s Spec) cluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 s.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: s.Name},
		ConnectTimeout:       durationpb.New(connectTimeout),
		CircuitBreakers:      circuitBreakers(),
		LbPolicy:             clusterv3.Cluster_RING_HASH,
		LbConfig: &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(min(MaxRingSize, PointsPerArbiter*uint64(len(s.Arbiters)))),
			MaximumRingSize: wrapperspb.UInt64(MaxRingSize),
			HashFunction:    clusterv3.Cluster_RingHashLbConfig_XX_HASH,
		}},
	}
}

// maxCalls bounds the calls in flight to the arbiters through one client
// channel (gRPC) or one Envoy. Envoy's and gRPC's default is 1,024, and
// every session's keepalive stream and every waiter holds one: the
// arbiters' own quotas are the limit that means something.
const maxCalls = 1 << 20

func circuitBreakers() *clusterv3.CircuitBreakers {
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     wrapperspb.UInt32(maxCalls),
		MaxPendingRequests: wrapperspb.UInt32(maxCalls),
		MaxRequests:        wrapperspb.UInt32(maxCalls),
	}}}
}

// endpoints are the arbiters, one locality, equal weights. Sorted, so
// that one set of arbiters is one resource whatever order it was given
// in: the ring depends on the addresses, not the order.
func (s Spec) endpoints() *endpointv3.ClusterLoadAssignment {
	addrs := slices.Sorted(slices.Values(s.Arbiters))
	lb := make([]*endpointv3.LbEndpoint, 0, len(addrs))
	for _, a := range addrs {
		host, port, _ := splitAddr(a)
		lb = append(lb, &endpointv3.LbEndpoint{
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Protocol: corev3.SocketAddress_TCP, Address: host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
				}}},
			}},
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: s.Name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints:         lb,
		}},
	}
}
