//go:build lockplane_broken_rules

package arbiter

import "github.com/lockplane/lockplane/services/internal/arbiter/admin"

// The Admin API's rule-breaking switches (admin/broken.go), built only
// with the lockplane_broken_rules tag, for brokenrules_test.go.
var (
	BreakForceCompare  = admin.BreakForceCompare
	BreakTwoPersonRule = admin.BreakTwoPersonRule
	BreakClaimCompare  = admin.BreakClaimCompare
)
