package oidcauth

import (
	"testing"
	"time"
)

// What the provider cannot be made to send: no auth_time, or one from
// the future beyond clock skew. Both are refused by rule auth_time.
func TestRecentSignInRefusesMissingAndFutureAuthTime(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	v := &Verifier{cfg: Config{MaxAuthAge: DefaultMaxAuthAge, Now: func() time.Time { return now }}}
	for _, tc := range []struct {
		name string
		at   float64
		ok   bool
	}{
		{"missing", 0, false},
		{"an hour ago", float64(now.Add(-time.Hour).Unix()), true},
		{"just under the maximum", float64(now.Add(-DefaultMaxAuthAge + time.Second).Unix()), true},
		{"just over the maximum", float64(now.Add(-DefaultMaxAuthAge - time.Second).Unix()), false},
		{"a minute ahead (skew)", float64(now.Add(time.Minute).Unix()), true},
		{"an hour ahead", float64(now.Add(time.Hour).Unix()), false},
	} {
		_, err := v.recentSignIn(tc.at)
		if (err == nil) != tc.ok || (err != nil && RuleOf(err) != RuleAuthTime) {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
