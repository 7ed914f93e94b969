package oidcauth_test

import (
	"context"
	"testing"

	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
)

func TestDifferentPerson(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	v := verifier(t, operatorConfig(p))
	verify := func(user string) oidcauth.Operator {
		op, err := v.Verify(context.Background(), signIn(t, p, user, true))
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	alice1, alice2, bob := verify("alice"), verify("alice"), verify("bob")
	if err := oidcauth.DifferentPerson(alice1, alice2); oidcauth.RuleOf(err) != oidcauth.RuleSamePerson {
		t.Errorf("alice approving alice: %v", err)
	}
	if err := oidcauth.DifferentPerson(alice1, bob); err != nil {
		t.Errorf("bob approving alice: %v", err)
	}
	if err := oidcauth.DifferentPerson(alice1, oidcauth.Operator{}); oidcauth.RuleOf(err) != oidcauth.RuleSubject {
		t.Errorf("empty approver: %v", err)
	}
	// The same subject at another issuer is another identity.
	other := alice1
	other.Issuer = "https://elsewhere.example"
	if err := oidcauth.DifferentPerson(alice1, other); err != nil {
		t.Errorf("same sub, other issuer: %v", err)
	}
}

// A second-factor requirement that one factor meets is refused.
func TestCheckSecondFactorRefusesSingleFactors(t *testing.T) {
	for _, tc := range []struct {
		amr  []string
		acr  string
		okay bool
	}{
		{[]string{"otp"}, "", true},
		{nil, "2", true},
		{[]string{"otp", "pwd"}, "", false},
		{nil, "1", false},
		{nil, "", false},
	} {
		if err := oidcauth.CheckSecondFactor(tc.amr, tc.acr); (err == nil) != tc.okay {
			t.Errorf("amr %v acr %q: %v, want ok %v", tc.amr, tc.acr, err, tc.okay)
		}
	}
}
