// Package caller is who a call to the arbiter is from: the verified peer
// of its mTLS connection, or, when that peer is the trusted fan-in proxy
// (an Envoy that terminates the workloads' mTLS, docs/fan-in.md), the
// client certificate the proxy forwarded in x-forwarded-client-cert.
//
// The header is read only from the trusted proxy's connections: from any
// other peer it is ignored, so a workload cannot name another identity.
package caller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// ForwardedHeader is where the proxy forwards the client's certificate
// (Envoy's forward_client_cert_details SANITIZE_SET, with its URI).
const ForwardedHeader = "x-forwarded-client-cert"

type forwardedKey struct{}

// Of is the caller of the call ctx belongs to.
func Of(ctx context.Context) (spiffeid.ID, error) {
	if id, ok := ctx.Value(forwardedKey{}).(spiffeid.ID); ok {
		return id, nil
	}
	return identity.Caller(ctx)
}

// Proxy is the fan-in proxy whose forwarded certificates name callers;
// the zero Proxy trusts none.
type Proxy struct {
	id         spiffeid.ID
	isOperator func(spiffeid.ID) bool
}

// Trusting is the Proxy of id. It forwards workloads' lock.v1 calls only:
// an operator, and every Admin API call, dials an arbiter, so that
// whoever holds the proxy's SVID cannot act as an operator.
func Trusting(id spiffeid.ID, isOperator func(spiffeid.ID) bool) Proxy {
	return Proxy{id: id, isOperator: isOperator}
}

// forwardable are the services the proxy's calls may be made for.
var forwardable = []string{"/" + lockv1.LockService_ServiceDesc.ServiceName + "/", "/grpc.health.v1.Health/"}

// resolve puts the forwarded caller in ctx when the peer is the proxy. A
// call from the proxy that forwards no single, valid SPIFFE ID of the
// proxy's trust domain is refused: the proxy strips what clients send
// and sets its own, so anything else is a misconfigured proxy.
func (p Proxy) resolve(ctx context.Context, method string) (context.Context, error) {
	if p.id.IsZero() {
		return ctx, nil
	}
	if peer, err := identity.Caller(ctx); err != nil || peer != p.id {
		return ctx, nil
	}
	if !slices.ContainsFunc(forwardable, func(prefix string) bool { return strings.HasPrefix(method, prefix) }) {
		return nil, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED,
			"the fan-in proxy forwards lock.v1 calls only: operators and the Admin API dial an arbiter")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(ForwardedHeader)
	if len(vals) != 1 {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED,
			fmt.Sprintf("a call from the fan-in proxy carried %d %s headers, not one: the proxy must set the client certificate's URI (forward_client_cert_details SANITIZE_SET)", len(vals), ForwardedHeader))
	}
	id, err := forwardedID(vals[0])
	switch {
	case err != nil:
	case !id.MemberOf(p.id.TrustDomain()):
		err = fmt.Errorf("the forwarded identity is not of trust domain %s", p.id.TrustDomain())
	case id == p.id || (p.isOperator != nil && p.isOperator(id)):
		err = fmt.Errorf("the forwarded identity is the proxy's or an operator's: they dial an arbiter")
	}
	if err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, ForwardedHeader+": "+err.Error())
	}
	return context.WithValue(ctx, forwardedKey{}, id), nil
}

// forwardedID is the URI of the one element of an x-forwarded-client-cert
// value (key=value pairs split by ';', elements by ','). Its messages
// never quote the value, which the proxy took from a client.
func forwardedID(v string) (spiffeid.ID, error) {
	elems := splitUnquoted(v, ',')
	if len(elems) != 1 {
		return spiffeid.ID{}, fmt.Errorf("%d certificates are forwarded; exactly one is required", len(elems))
	}
	var uri string
	uris := 0
	for _, pair := range splitUnquoted(elems[0], ';') {
		k, val, ok := strings.Cut(pair, "=")
		if !ok {
			return spiffeid.ID{}, fmt.Errorf("a part is not key=value")
		}
		if strings.EqualFold(strings.TrimSpace(k), "URI") {
			uri, uris = strings.TrimSpace(val), uris+1
		}
	}
	if uris != 1 {
		return spiffeid.ID{}, fmt.Errorf("%d URI fields, not one", uris)
	}
	// A URI is never quoted (it has no ';' or ','): one that is came
	// through escapes, which are not worth trusting.
	if strings.ContainsAny(uri, `"\`) {
		return spiffeid.ID{}, fmt.Errorf("the URI is quoted or escaped")
	}
	id, err := spiffeid.FromString(uri)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("the URI is not a SPIFFE ID")
	}
	return id, nil
}

// splitUnquoted splits s at sep outside double quotes; inside them, a
// backslash escapes the next byte.
func splitUnquoted(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case quoted && s[i] == '\\':
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// Unary resolves each unary call's caller before next.
func (p Proxy) Unary(next grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if p.id.IsZero() {
		return next
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := p.resolve(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return next(ctx, req, info, handler)
	}
}

// Stream resolves each stream's caller (a keepalive stream's) once.
func (p Proxy) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := p.resolve(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, stream{ss, ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s stream) Context() context.Context { return s.ctx }
