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
// lock every key: the posture until prefix grants are configured.
type allowTrustDomain struct{}

// MayLock implements Authorizer.
func (allowTrustDomain) MayLock(spiffeid.ID, string) bool { return true }

// OperatorPathPrefix returns an IsOperator that accepts IDs of the trust
// domain whose path starts with prefix, e.g. "/operator/".
func OperatorPathPrefix(td spiffeid.TrustDomain, prefix string) func(spiffeid.ID) bool {
	return func(id spiffeid.ID) bool {
		return id.MemberOf(td) && strings.HasPrefix(id.Path(), prefix)
	}
}
