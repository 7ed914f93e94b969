package lockkey

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateAccepts(t *testing.T) {
	for _, k := range []string{"team-a/orders/42", "a/b", "ns/x.y_z-1/..a", "n/" + strings.Repeat("k", MaxLen-2)} {
		if err := Validate(k); err != nil {
			t.Errorf("Validate(%.40q) = %v, want nil", k, err)
		}
	}
}

func TestValidateNamesRule(t *testing.T) {
	for _, c := range []struct {
		key  string
		rule Rule
	}{
		{"", RuleEmpty},
		{"n/" + strings.Repeat("k", MaxLen), RuleTooLong},
		{"team-a/orders 42", RuleCharacters},
		{"team-a/ördere", RuleCharacters},
		{"team-a/a\x00b", RuleCharacters},
		{"orders", RuleSegments},
		{"/team-a/orders", RuleEmptySeg},
		{"team-a/orders/", RuleEmptySeg},
		{"team-a//orders", RuleEmptySeg},
		{"team-a/../team-b", RuleDotSeg},
		{"team-a/./x", RuleDotSeg},
		{"..", RuleDotSeg},
	} {
		err := Validate(c.key)
		var ke *Error
		if !errors.As(err, &ke) || ke.Rule != c.rule {
			t.Errorf("Validate(%.40q) = %v, want rule %q", c.key, err, c.rule)
			continue
		}
		if !strings.Contains(err.Error(), string(c.rule)) {
			t.Errorf("error %q does not name rule %q", err, c.rule)
		}
	}
}

func TestNamespace(t *testing.T) {
	if ns := Namespace("team-a/orders/42"); ns != "team-a" {
		t.Fatalf("Namespace = %q", ns)
	}
}
