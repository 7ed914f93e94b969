package admin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// OperatorRoot is the SPIFFE ID path reserved for operators. Policy
// validation (policy.ReservedPaths) refuses a grant that would have SPIRE
// issue a workload an ID under it, so an operator prefix must lie within
// it: anywhere else a LockGrant could make a workload an operator.
const OperatorRoot = "/operator"

// OperatorPrefix is the SPIFFE ID path of operators' SVIDs, matched by
// whole segments: "/operator" covers /operator and /operator/alice, never
// /operatorX. The zero value covers nothing.
type OperatorPrefix struct{ path string }

// ParseOperatorPrefix reads a prefix such as "/operator" or "/operator/"
// (the same prefix). It refuses a path that is not a SPIFFE ID path, the
// root (every workload an operator), and a path outside OperatorRoot.
func ParseOperatorPrefix(s string) (OperatorPrefix, error) {
	if s != "" && !strings.HasPrefix(s, "/") {
		return OperatorPrefix{}, fmt.Errorf("%q must start with / (a SPIFFE ID path, e.g. %s)", s, OperatorRoot)
	}
	p := strings.TrimSuffix(s, "/")
	if p == "" {
		return OperatorPrefix{}, fmt.Errorf("%q must name at least one segment, e.g. %s: the root would make every workload an operator", s, OperatorRoot)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" {
			return OperatorPrefix{}, fmt.Errorf("%q has an empty segment (//)", s)
		}
		if seg == "." || seg == ".." {
			return OperatorPrefix{}, fmt.Errorf("%q: segment %q is a dot segment; SPIFFE IDs have none", s, seg)
		}
	}
	if err := spiffeid.ValidatePath(p); err != nil {
		return OperatorPrefix{}, fmt.Errorf("%q: each segment may hold letters, digits, '.', '-' and '_' only: %v", s, err)
	}
	root := OperatorPrefix{path: OperatorRoot}
	if !root.Covers(p) {
		return OperatorPrefix{}, fmt.Errorf("%q must be %s or a path under it: the policy set reserves %s for operators (no LockGrant may register a workload there), elsewhere a workload could be made an operator", s, OperatorRoot, OperatorRoot)
	}
	return OperatorPrefix{path: p}, nil
}

// String is the prefix without a trailing slash, e.g. "/operator".
func (p OperatorPrefix) String() string { return p.path }

// Covers reports whether the SPIFFE ID path is the prefix or under it,
// by whole segments.
func (p OperatorPrefix) Covers(path string) bool {
	return p.path != "" && (path == p.path || strings.HasPrefix(path, p.path+"/"))
}

// IsOperator is the Config.IsOperator of the prefix: IDs of td whose path
// it covers.
func (p OperatorPrefix) IsOperator(td spiffeid.TrustDomain) func(spiffeid.ID) bool {
	return func(id spiffeid.ID) bool { return id.MemberOf(td) && p.Covers(id.Path()) }
}

// errNoAccount is an operator SVID that names no one.
var errNoAccount = errors.New("names no account")

// svidAccount is the account an operator SVID names: its last path
// segment (spiffe://td/operator/alice names alice).
func svidAccount(id spiffeid.ID) (string, error) {
	path := id.Path()
	i := strings.LastIndexByte(path, '/')
	if i < 0 || path[i+1:] == "" {
		return "", errNoAccount
	}
	return path[i+1:], nil
}
