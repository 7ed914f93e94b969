package fanin

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	localrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// EnvoyConfig is what an Envoy of the fan-in tier needs besides the Spec:
// where it listens, where the control plane and the SPIRE agent are, and
// the per-identity rate. Envoy takes its SVID and the trust bundle from
// the SPIRE agent's SDS, the arbiters' endpoints from the control plane
// (EDS over ADS), and routes as the gRPC clients do: the same ring.
type EnvoyConfig struct {
	// Listen is the address workloads connect to, host:port.
	Listen string
	// ControlPlane is lockplane-fanin's ADS address, host:port, and
	// ControlPlaneID the SPIFFE ID it must present.
	ControlPlane, ControlPlaneID string
	// ArbiterID is the SPIFFE ID every arbiter must present.
	ArbiterID string
	// SPIRESocket is the SPIRE agent's Workload API socket path, whose
	// SDS serves Envoy's SVID ("default") and bundle ("ROOTCA").
	SPIRESocket string
	// CallRate and CallBurst limit each client certificate's calls a
	// second at this Envoy (0: no limit), refused RESOURCE_EXHAUSTED.
	CallRate, CallBurst uint32
}

// The names the SPIRE agent's SDS serves by default, and Envoy's own
// clusters.
const (
	sdsSVID          = "default"
	sdsBundle        = "ROOTCA"
	spireCluster     = "spire_agent"
	xdsCluster       = "lockplane_xds"
	identityKey      = "identity"
	limitedKey       = "call"
	limitedValue     = "limited"
	xfcc             = "x-forwarded-client-cert"
	rateLimitHeader  = "x-lockplane-rate-limit"
	maxIdentityLimit = 10000
)

func (c EnvoyConfig) validate() error {
	for _, f := range []struct{ name, addr string }{{"listen", c.Listen}, {"control_plane", c.ControlPlane}} {
		if _, _, err := splitAddr(f.addr); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	for _, f := range []struct{ name, id string }{{"control_plane_id", c.ControlPlaneID}, {"arbiter_id", c.ArbiterID}} {
		if _, err := spiffeid.FromString(f.id); err != nil {
			return fmt.Errorf("%s: %q is not a SPIFFE ID: %w", f.name, f.id, err)
		}
	}
	if c.SPIRESocket == "" {
		return errors.New("spire_socket: is required: Envoy's SVID and bundle come from the SPIRE agent")
	}
	if c.CallRate == 0 && c.CallBurst != 0 {
		return errors.New("call_burst: is set without call_rate")
	}
	return nil
}

// Envoy is the bootstrap of an Envoy of the fan-in tier, checked with
// the protos' own validation (each typed config too, before it is
// packed).
func (s Spec) Envoy(c EnvoyConfig) (*bootstrapv3.Bootstrap, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	l, err := s.envoyListener(c)
	if err != nil {
		return nil, err
	}
	arbiters, err := s.envoyCluster(c)
	if err != nil {
		return nil, err
	}
	xds, err := controlPlaneCluster(c)
	if err != nil {
		return nil, err
	}
	spire, err := spireAgentCluster(c)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: "lockplane-envoy", Cluster: s.Name},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: []*listenerv3.Listener{l},
			Clusters:  []*clusterv3.Cluster{arbiters, xds, spire},
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: xdsCluster}}}},
			},
		},
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("fanin: the Envoy bootstrap fails its validation: %w", err)
	}
	return b, nil
}

// packed validates m and packs it for a typed_config.
func packed(m interface {
	proto.Message
	ValidateAll() error
}) (*anypb.Any, error) {
	if err := m.ValidateAll(); err != nil {
		return nil, fmt.Errorf("fanin: %T fails its validation: %w", m, err)
	}
	return anypb.New(m)
}

// sds is an SDS secret of the SPIRE agent.
func sds(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: spireCluster}}}},
		}},
	}}
}

// tlsContext presents Envoy's SVID and checks the peer against the bundle
// and, when peer is set, its SPIFFE ID.
func tlsContext(peer string) *tlsv3.CommonTlsContext {
	validation := &tlsv3.CertificateValidationContext{}
	if peer != "" {
		validation.MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: peer}},
		}}
	}
	return &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds(sdsSVID)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         validation,
				ValidationContextSdsSecretConfig: sds(sdsBundle),
			}},
	}
}

func upstreamTLS(peer string) (*corev3.TransportSocket, error) {
	a, err := packed(&tlsv3.UpstreamTlsContext{CommonTlsContext: tlsContext(peer)})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}, nil
}

// http2 makes a cluster speak HTTP/2 upstream: gRPC.
func http2() (map[string]*anypb.Any, error) {
	a, err := packed(&upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
	if err != nil {
		return nil, err
	}
	return map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": a}, nil
}

// envoyCluster is the arbiters' cluster as the gRPC clients see it (ring
// hash, endpoints from the control plane), with mTLS to each arbiter.
func (s Spec) envoyCluster(c EnvoyConfig) (*clusterv3.Cluster, error) {
	cl := s.cluster()
	ts, err := upstreamTLS(c.ArbiterID)
	if err != nil {
		return nil, err
	}
	if cl.TypedExtensionProtocolOptions, err = http2(); err != nil {
		return nil, err
	}
	cl.TransportSocket = ts
	return cl, nil
}

func controlPlaneCluster(c EnvoyConfig) (*clusterv3.Cluster, error) {
	host, port, _ := splitAddr(c.ControlPlane)
	ts, err := upstreamTLS(c.ControlPlaneID)
	if err != nil {
		return nil, err
	}
	opts, err := http2()
	if err != nil {
		return nil, err
	}
	return &clusterv3.Cluster{
		Name:                          xdsCluster,
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
		ConnectTimeout:                durationpb.New(connectTimeout),
		TypedExtensionProtocolOptions: opts,
		TransportSocket:               ts,
		LoadAssignment:                singleEndpoint(xdsCluster, &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}),
	}, nil
}

func spireAgentCluster(c EnvoyConfig) (*clusterv3.Cluster, error) {
	opts, err := http2()
	if err != nil {
		return nil, err
	}
	return &clusterv3.Cluster{
		Name:                          spireCluster,
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:                durationpb.New(connectTimeout),
		TypedExtensionProtocolOptions: opts,
		LoadAssignment:                singleEndpoint(spireCluster, &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: c.SPIRESocket}}}),
	}, nil
}

func singleEndpoint(name string, addr *corev3.Address) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}},
	}}}
}

// envoyListener terminates the workloads' mTLS (any SVID of the trust
// bundle: the arbiter authorises), passes the caller's certificate on
// (x-forwarded-client-cert, which the rate limit keys on), rate-limits
// and routes by the key.
func (s Spec) envoyListener(c EnvoyConfig) (*listenerv3.Listener, error) {
	host, port, _ := splitAddr(c.Listen)
	var filters []*hcmv3.HttpFilter
	if c.CallRate > 0 {
		rl, err := packed(localRateLimit(c))
		if err != nil {
			return nil, err
		}
		filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.local_ratelimit", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: rl}})
	}
	router, err := packed(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}})
	hcm, err := packed(&hcmv3.HttpConnectionManager{
		StatPrefix:                  s.Name,
		CodecType:                   hcmv3.HttpConnectionManager_AUTO,
		StreamIdleTimeout:           durationpb.New(0),
		Http2ProtocolOptions:        &corev3.Http2ProtocolOptions{},
		ForwardClientCertDetails:    hcmv3.HttpConnectionManager_SANITIZE_SET,
		SetCurrentClientCertDetails: &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Uri: true},
		RouteSpecifier:              &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: s.envoyRoute()},
		HttpFilters:                 filters,
	})
	if err != nil {
		return nil, err
	}
	tls, err := packed(&tlsv3.DownstreamTlsContext{CommonTlsContext: tlsContext(""), RequireClientCertificate: wrapperspb.Bool(true)})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name: s.Name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}},
		FilterChains: []*listenerv3.FilterChain{{
			Filters:         []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}},
			TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tls}},
		}},
	}, nil
}

// envoyRoute is the clients' route for lock.v1 only (the arbiters trust
// Envoy's forwarded certificate for nothing else: operators dial an
// arbiter), without Envoy's default timeouts: a waiting Acquire sends
// nothing for as long as it waits, past the 15 s route timeout and the
// 5 min idle timeout. Each call is bounded by its own grpc-timeout
// instead, which the arbiter also honours.
func (s Spec) envoyRoute() *routev3.RouteConfiguration {
	r := s.route()
	route := r.VirtualHosts[0].Routes[0]
	route.Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: lockServicePrefix}}
	action := route.GetRoute()
	action.Timeout = durationpb.New(0)
	action.IdleTimeout = durationpb.New(0)
	action.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)}
	return r
}

// lockServicePrefix is the path prefix of lock.v1's calls.
const lockServicePrefix = "/lockplane.lock.v1.LockService/"

// limitedPaths are the calls Envoy rate-limits, as the arbiter does
// (--call-rate): those that start something. A Release or CloseSession
// refused would leave a hold or a session behind.
const limitedPaths = `^/lockplane\.lock\.v1\.LockService/(Acquire|OpenSession|Inspect)$`

// localRateLimit gives each client certificate (its x-forwarded-client-cert
// value, so an SVID rotation starts a new bucket) a bucket of its own, for
// the most active maxIdentityLimit of them.
func localRateLimit(c EnvoyConfig) *localrlv3.LocalRateLimit {
	burst := c.CallBurst
	if burst == 0 {
		burst = c.CallRate
	}
	bucket := &typev3.TokenBucket{MaxTokens: burst, TokensPerFill: wrapperspb.UInt32(c.CallRate), FillInterval: durationpb.New(time.Second)}
	all := &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}}
	return &localrlv3.LocalRateLimit{
		StatPrefix: "lockplane_identity_rate",
		// The default bucket is never the limit: every call carries a
		// certificate, so every call matches the identity descriptor.
		TokenBucket:    &typev3.TokenBucket{MaxTokens: 1 << 30, TokensPerFill: wrapperspb.UInt32(1 << 30), FillInterval: durationpb.New(time.Second)},
		FilterEnabled:  all,
		FilterEnforced: all,
		// A call produces the descriptor only when both actions do: a
		// limited path, and a forwarded certificate.
		Descriptors: []*ratelimitv3.LocalRateLimitDescriptor{{
			Entries:     []*ratelimitv3.RateLimitDescriptor_Entry{{Key: limitedKey, Value: limitedValue}, {Key: identityKey}},
			TokenBucket: bucket,
		}},
		RateLimits: []*routev3.RateLimit{{Actions: []*routev3.RateLimit_Action{
			{ActionSpecifier: &routev3.RateLimit_Action_HeaderValueMatch_{HeaderValueMatch: &routev3.RateLimit_Action_HeaderValueMatch{
				DescriptorKey: limitedKey, DescriptorValue: limitedValue, ExpectMatch: wrapperspb.Bool(true),
				Headers: []*routev3.HeaderMatcher{{Name: ":path", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
					StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: limitedPaths}}}}}},
			}}},
			{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
				RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: xfcc, DescriptorKey: identityKey}}},
		}}},
		MaxDynamicDescriptors:          wrapperspb.UInt32(maxIdentityLimit),
		RateLimitedAsResourceExhausted: true,
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: rateLimitHeader,
			Value: strconv.FormatUint(uint64(c.CallRate), 10) + " calls a second, bursts of " + strconv.FormatUint(uint64(burst), 10) + ", per client certificate"}}},
	}
}
