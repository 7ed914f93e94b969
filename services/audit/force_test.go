package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"google.golang.org/grpc/metadata"
)

// twoOperators stands in for the OpenID Connect verifier: the token is
// the operator's name. The real verifier's integration test comes with
// its wiring (services/operator).
type twoOperators struct{}

func (twoOperators) Verify(_ context.Context, raw string) (admin.Operator, error) {
	switch raw {
	case "alice", "bob":
		return admin.Operator{Issuer: "https://idp.test", Subject: "u-" + raw, Name: raw}, nil
	}
	return admin.Operator{}, errors.New("unknown token")
}

// A force-release's Txn deletes the hold and puts /sys/force/<id>: the
// tailer records the hold's end as force_release, with the record (who
// asked, who approved, why) as its detail, and never the token.
func TestAForceReleaseIsRecordedAsSuch(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Operators: twoOperators{}})
	ctx := ctxT(t, 60*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	store := audittest.New()
	tail(t, env, store, "t1")
	h, err := s.TryLock(ctx, "team-a/leaked", noFence)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	as := func(who string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+who)
	}
	req, err := admin.RequestForceRelease(as("alice"), &adminv1.RequestForceReleaseRequest{Key: "team-a/leaked", Reason: "stuck job"})
	if err != nil {
		t.Fatal(err)
	}
	// bob approves on his own operator SVID: a token binds to its SVID.
	approved, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "bob").Conn()).ApproveAction(as("bob"), &adminv1.ApproveActionRequest{Id: req.GetAction().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var ended audit.Event
	err = store.Await(ctx, func(evs []audit.Event) bool {
		for _, e := range evs {
			if e.Key == "team-a/leaked" && e.Revision == approved.GetForceRelease().GetRevision() {
				ended = e
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if ended.Kind != audit.ForceRelease || ended.Session != s.ID() || ended.Identity == "" {
		t.Fatalf("the hold's end was recorded as %+v, want force_release of the holder's session", ended)
	}
	var rec struct {
		Action, Requester, Approver, Reason, Enforcement string
	}
	if err := json.Unmarshal([]byte(ended.Detail), &rec); err != nil {
		t.Fatalf("detail %q is not the force record: %v", ended.Detail, err)
	}
	if rec.Action != req.GetAction().GetId() || rec.Requester == "" || rec.Approver == "" || rec.Requester == rec.Approver ||
		rec.Reason != "stuck job" || rec.Enforcement != "unknown" {
		t.Fatalf("force record in the detail = %+v", rec)
	}
	for _, needle := range []string{"alice", "bob"} {
		if !contains(ended.Detail, needle) {
			t.Fatalf("detail %q does not name %s", ended.Detail, needle)
		}
	}
	if contains(ended.Detail, jsonNumber(uint64(h.Token()))) {
		t.Fatalf("detail holds the token: %s", ended.Detail)
	}
}

func contains(s, sub string) bool { return len(sub) > 0 && strings.Contains(s, sub) }

func jsonNumber(v uint64) string { return strconv.FormatUint(v, 10) }
