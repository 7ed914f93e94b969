package main

import (
	"os"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// upOutputs are a region's outputs as up reads them (secrets opened),
// with the people's SVIDs given.
func upOutputs(certs, keys map[string]any) auto.OutputMap {
	out := auto.OutputMap{
		"arbiterEndpoints": {Value: []any{"10.0.0.1:7443"}}, "arbiterServerId": {Value: "spiffe://td.test/lockplane/arbiter"},
		"trustDomain": {Value: "td.test"}, "spiffeBundlePem": {Value: "BUNDLE"},
		"clientSvidPem": {Value: "DEMO CERT"}, "clientKeyPem": {Value: "DEMO KEY", Secret: true},
		"operatorSvidPem": {Value: "DEPLOYER CERT"}, "operatorKeyPem": {Value: "DEPLOYER KEY", Secret: true},
	}
	if certs != nil {
		out["operatorPeopleSvidPems"] = auto.OutputValue{Value: certs}
		out["operatorPeopleKeyPems"] = auto.OutputValue{Value: keys, Secret: true}
	}
	return out
}

// The profile up writes holds each of operators.people's own operator
// SVID as identity <name>, beside the shared operator (the deployer's,
// for the one-person admin calls): a person's ID token acts only on
// their own SVID, so the two-person actions need one per person.
func TestTheProfileHoldsEachOperatorsOwnSVID(t *testing.T) {
	root := t.TempDir()
	path, err := writeProfile(root, "local", upOutputs(map[string]any{"alice": "ALICE CERT", "bob": "BOB CERT"},
		map[string]any{"alice": "ALICE KEY", "bob": "BOB KEY"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Identities["operator"].SPIFFEID; got != "spiffe://td.test/operator/deployer" {
		t.Fatalf("identity operator: %q, want the shared deployer SVID kept", got)
	}
	for _, who := range []string{"alice", "bob"} {
		id, ok := p.Identities[who]
		if !ok || id.SPIFFEID != "spiffe://td.test/operator/"+who {
			t.Fatalf("identity %s: %+v (have %v), want spiffe://td.test/operator/%s", who, id, p.Names(), who)
		}
		cert, _ := os.ReadFile(id.Cert)
		key, _ := os.ReadFile(id.Key)
		if string(cert) != strings.ToUpper(who)+" CERT" || string(key) != strings.ToUpper(who)+" KEY" {
			t.Fatalf("identity %s: cert %q, key %q", who, cert, key)
		}
		if st, err := os.Stat(id.Key); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s's key file: %v, %v; want 0600", who, st.Mode(), err)
		}
	}
	// A person whose key the outputs lack is refused, not written half.
	if _, err := writeProfile(t.TempDir(), "local", upOutputs(map[string]any{"alice": "ALICE CERT"}, map[string]any{})); err == nil ||
		!strings.Contains(err.Error(), "lack operator alice's SVID or key") {
		t.Fatalf("alice without a key: %v", err)
	}
	// A stack without people: the profile as before.
	if path, err = writeProfile(t.TempDir(), "local", upOutputs(nil, nil)); err == nil {
		p, err = profile.Load(path)
	}
	if err != nil || len(p.Identities) != 2 {
		t.Fatalf("no people: %v, profile %+v", err, p)
	}
}
