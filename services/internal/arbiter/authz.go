package arbiter

import (
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Authorizer decides whether an identity may lock a key. Denials must not
// depend on the key's state (ADR-19): it is called before any etcd read.
//
// It is asked once per call, by the gRPC server the call arrived at (an
// Arbiter serving alone, or the Router in front of a region's arbiters;
// see admitter): the arbiters behind a Router trust its admission.
type Authorizer interface {
	MayLock(id spiffeid.ID, key string) bool
}

// allowTrustDomain lets every authenticated workload of the trust domain
// lock every key. Unexported, and refused as Config.Authorizer: open
// authorisation is Config.AllowAnyWorkload alone, which is logged and
// exported, never a value that could be passed in silently.
type allowTrustDomain struct{}

// MayLock implements Authorizer.
func (allowTrustDomain) MayLock(spiffeid.ID, string) bool { return true }

// isOpen reports whether az is the open authorizer, however it is wrapped.
func isOpen(az Authorizer) bool {
	switch az.(type) {
	case allowTrustDomain, *allowTrustDomain:
		return true
	}
	return false
}

// OperatorPathPrefix returns an IsOperator that accepts IDs of the trust
// domain whose path starts with prefix, e.g. "/operator/".
func OperatorPathPrefix(td spiffeid.TrustDomain, prefix string) func(spiffeid.ID) bool {
	return func(id spiffeid.ID) bool {
		return id.MemberOf(td) && strings.HasPrefix(id.Path(), prefix)
	}
}
