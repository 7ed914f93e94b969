package arbiter_test

import (
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The one-person advance takes a reason under the same rule as the
// two-person one: bounded, and no character that hides or breaks text on
// the next operator's terminal (issue 32).
func TestOnePersonAdvanceReasonFollowsTheOperatorTextRule(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	st, err := admin.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{strings.Repeat("x", 10<<10), "line\u2028break", "zero\u200bwidth", "mark\u200eed", "arabic\u061cmark", "iso\u2066late"} {
		_, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: bad})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "reason") {
			t.Fatalf("one-person advance with reason %.40q: %v, want INVALID_ARGUMENT naming reason", bad, err)
		}
	}
	if _, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "drill: two\nlines, ünïcode"}); err != nil {
		t.Fatalf("a plain reason: %v", err)
	}
}

// An epoch record's reason holds the requester's text: a reason that
// quotes another request's mark must not make reading back that request
// find it carried out. Request B is claimed and stopped (executing, its
// advance never made); request A, whose reason forges B's mark, is
// approved; B read back is still not approved.
func TestAdvanceReadBackIgnoresAForgedMark(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	admin := adminOf(t, env)
	st, victim := requestAdvance(t, ctx, admin)
	b := victim.GetAction().GetId()
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionClaimed: func(string) bool { return true }})
	_, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: b})
	env.Arbiter.SetTestHooks(nil)
	if err == nil {
		t.Fatal("the stopped approval answered")
	}
	forged, err := admin.RequestEpochAdvance(as(ctx, "tok-alice"), &adminv1.RequestEpochAdvanceRequest{Advance: &adminv1.AdvanceEpochRequest{
		ExpectedEpoch: st.GetEpoch(), Reason: "routine (by x, request " + b + " at 2020-01-01T00:00:00Z)"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: forged.GetAction().GetId()}); err != nil {
		t.Fatal(err)
	}
	rec, _, err := epoch.Read(ctx, env.Etcd)
	if err != nil || !strings.Contains(rec.Reason, ", request "+b+" at ") {
		t.Fatalf("the epoch record's reason %q does not quote B's mark (err %v): the test shows nothing", rec.Reason, err)
	}
	if s := actionState(t, ctx, admin, b); s == "approved" {
		t.Fatalf("request %s, never carried out, reads back approved from another request's reason %q", b, rec.Reason)
	}
}
