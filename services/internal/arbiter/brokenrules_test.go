//go:build lockplane_broken_rules

package arbiter_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
)

// The negative controls of the Admin API's safety tests: each rule is
// broken on purpose and the scenario that tests it must then see a
// violation, or it does not test the rule. The switches exist only in
// builds with the lockplane_broken_rules tag (make test sets it), never
// in a shipped arbiter (services/cmd/arbiter's symbol test).

func TestABrokenTwoPersonRuleIsCaught(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/self-broken", noFence); err != nil {
		t.Fatal(err)
	}
	defer arbiter.BreakTwoPersonRule()()
	if err := sameOperator(t, ctx, env, "jobs/self-broken"); err == nil {
		t.Fatal("with the two-person rule broken the scenario saw no violation: it does not test the rule")
	} else {
		t.Logf("broken two-person rule: %v", err)
	}
}

func TestABrokenForceCompareIsCaught(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	defer arbiter.BreakForceCompare()()
	if err := changedHold(t, ctx, env, s, "jobs/changed-broken"); err == nil {
		t.Fatal("with the revision compare removed the scenario saw no violation: it does not test the compare")
	} else {
		t.Logf("broken force compare: %v", err)
	}
}

func TestABrokenClaimCompareIsCaught(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	defer arbiter.BreakClaimCompare()()
	if err := concurrentDecisions(t, ctx, env, s, [2]string{"jobs/race-broken-1", "jobs/race-broken-2"}); err == nil {
		t.Fatal("with the claim's compare removed the scenario saw no violation: it does not test the claim")
	} else {
		t.Logf("broken claim: %v", err)
	}
}
