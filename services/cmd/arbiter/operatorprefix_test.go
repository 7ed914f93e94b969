package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/devca"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A malformed --operator-prefix is refused before anything starts, naming
// the flag and the rule; one that would make everyone, or a service, an
// operator is malformed too.
func TestAMalformedOperatorPrefixIsRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct{ prefix, rule string }{
		{"operator/", "start with /"},
		{"/", "at least one segment"},
		{"", "at least one segment"},
		{"/operator//people", "empty segment"},
		{"/operator/../lockplane", "segment"},
		{"/Operator X", "segment"},
		{"/ops", "must be /operator or a path under it"},
		{"/lockplane", "must be /operator or a path under it"},
	} {
		f := flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdWithoutAuth: true, actionTTL: time.Hour, operatorPrefix: tc.prefix}
		err := run(context.Background(), f, log)
		if err == nil || !strings.Contains(err.Error(), "--operator-prefix") || !strings.Contains(err.Error(), tc.rule) {
			t.Errorf("--operator-prefix %q: %v, want a refusal naming the flag and %q", tc.prefix, err, tc.rule)
		}
	}
	for _, ok := range []string{"/operator", "/operator/", "/operator/people/"} {
		if _, err := parseOperatorPrefix(ok); err != nil {
			t.Errorf("--operator-prefix %q: %v", ok, err)
		}
	}
}

// The operator prefix is whole path segments: with --operator-prefix
// /operator (no trailing slash), spiffe://…/operatorX/eve is a workload,
// refused what only operators may do; /operator/alice is an operator.
func TestTheOperatorPrefixMatchesWholeSegments(t *testing.T) {
	dir := t.TempDir()
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	// A CA of the same trust domain, to issue an SVID devenv has not.
	ca, err := devca.New(devenv.TrustDomain, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(t.TempDir(), "pki")
	bundle, err := ca.WriteBundle(mine)
	if err != nil {
		t.Fatal(err)
	}
	p := profile.Profile{Endpoint: "pending", ServerID: env.Profile.ServerID, TrustDomain: devenv.TrustDomain, Bundle: bundle,
		Identities: map[string]profile.Identity{}}
	for name, path := range map[string]string{"arbiter": devenv.Identities["arbiter"], "eve": "/operatorX/eve", "alice": "/operator/alice"} {
		files, err := ca.WriteSVID(filepath.Join(mine, name), path, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		p.Identities[name] = profile.Identity{SPIFFEID: "spiffe://" + devenv.TrustDomain + path, Cert: files.Cert, Key: files.Key}
	}
	f := arbiterFlags(t, env, dir)
	f.operatorPrefix = "/operator"
	f.svid.Cert, f.svid.Key, f.svid.Bundle = p.Identities["arbiter"].Cert, p.Identities["arbiter"].Key, bundle
	p.Endpoint = serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	advance := func(who string) error {
		c, err := lockclient.DialProfile(&p, who)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		admin := adminv1.NewAdminServiceClient(c.Conn())
		st, err := admin.Status(ctx, &adminv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "test"})
		return err
	}
	if err := advance("eve"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "only operators") {
		t.Errorf("/operatorX/eve advancing the epoch: %v, want PERMISSION_DENIED: not an operator", err)
	}
	// alice is an operator: past the operator check, refused only for
	// want of --allow-one-person-epoch-advance.
	if err := advance("alice"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("/operator/alice advancing the epoch: %v, want FAILED_PRECONDITION (one-person advance off)", err)
	}
}
