package admin

import (
	"testing"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// A prefix covers whole segments, with or without its trailing slash,
// in its own trust domain only.
func TestOperatorPrefixCoversWholeSegments(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("lockplane.test")
	for _, s := range []string{"/operator", "/operator/"} {
		p, err := ParseOperatorPrefix(s)
		if err != nil {
			t.Fatal(err)
		}
		is := p.IsOperator(td)
		for path, want := range map[string]bool{
			"/operator": true, "/operator/alice": true, "/operator/team/bob": true,
			"/operatorX": false, "/operatorX/eve": false, "/operators/eve": false, "/ns/operator/eve": false,
		} {
			if got := is(spiffeid.RequireFromPath(td, path)); got != want {
				t.Errorf("prefix %q, %s: operator %v, want %v", s, path, got, want)
			}
		}
		if is(spiffeid.RequireFromPath(spiffeid.RequireTrustDomainFromString("other.test"), "/operator/alice")) {
			t.Errorf("prefix %q: another trust domain's operator is one here", s)
		}
	}
	var zero OperatorPrefix
	if zero.Covers("/operator/alice") || zero.Covers("") {
		t.Error("the zero prefix covers something")
	}
}

// The signed-in person must be the one the operator SVID names.
func TestBoundRefusesAnotherPersonsToken(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("lockplane.test")
	alice := spiffeid.RequireFromPath(td, "/operator/alice")
	for _, tc := range []struct {
		svid spiffeid.ID
		name string
		ok   bool
	}{
		{alice, "alice", true},
		{spiffeid.RequireFromPath(td, "/operator/people/alice"), "alice", true},
		{alice, "bob", false},
		{alice, "", false},
		{alice, "Alice", false},
		{spiffeid.RequireFromPath(td, "/operator"), "alice", false},
		{spiffeid.RequireFromPath(td, "/operator/deployer"), "alice", false},
	} {
		err := bound(tc.svid, Operator{Issuer: "https://idp.test", Subject: "u-1", Name: tc.name})
		if (err == nil) != tc.ok {
			t.Errorf("%s signed in as %q: %v, want ok %v", tc.svid, tc.name, err, tc.ok)
		}
		if r, meta := reason.Info(err); err != nil && (r != lockv1.ErrorReason_PERMISSION_DENIED || meta["cause"] != "operator_svid_mismatch") {
			t.Errorf("%s signed in as %q: reason %s cause %q", tc.svid, tc.name, r, meta["cause"])
		}
	}
}
