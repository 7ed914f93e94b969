package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
)

// `arbiter probe` against a real arbiter: it passes on SERVING and prints
// the address that answered; once the cluster is sealed it fails, unless
// --sealed-ok (a DR stack), when it passes printing "sealed".
func TestArbiterProbeServingAndSealed(t *testing.T) {
	dir := t.TempDir()
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	pki := filepath.Join(dir, "pki")
	args := []string{"--addr", env.Addr, "--svid-cert", filepath.Join(pki, "arbiter", "svid.pem"), "--svid-key", filepath.Join(pki, "arbiter", "key.pem"),
		"--bundle", filepath.Join(pki, "bundle.pem"), "--trust-domain", devenv.TrustDomain}
	probeOnce := func(extra ...string) (int, string, string) {
		var out, errs bytes.Buffer
		code := probeMain(append(append([]string{}, args...), extra...), &out, &errs)
		return code, strings.TrimSpace(out.String()), errs.String()
	}
	if code, out, errs := probeOnce(); code != 0 || out != env.Addr {
		t.Fatalf("probe of a serving arbiter: exit %d, %q, %s; want 0 and %s", code, out, errs, env.Addr)
	}

	// The epoch record deleted: the arbiter seals its cluster (as a
	// restored one starts) and its health says NOT_SERVING.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Etcd.Delete(ctx, lockkey.EpochKey); err != nil {
		t.Fatal(err)
	}
	// Polled, as the Service's readiness loop polls: the seal reaches the
	// health service through the arbiter's epoch watch.
	var code int
	var out, errs string
	for ctx.Err() == nil {
		if code, out, errs = probeOnce(); code != 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 1 || !strings.Contains(errs, "NOT_SERVING") {
		t.Fatalf("probe of a sealed arbiter: exit %d, %q, %s; want 1 naming NOT_SERVING", code, out, errs)
	}
	if code, out, errs := probeOnce("--sealed-ok"); code != 0 || out != env.Addr+" sealed" {
		t.Fatalf("probe --sealed-ok of a sealed arbiter: exit %d, %q, %s; want 0 and %q", code, out, errs, env.Addr+" sealed")
	}
}

// The probe refuses what cannot be a check of this region's arbiter.
func TestArbiterProbeRefusesBadFlags(t *testing.T) {
	var out, errs bytes.Buffer
	if code := probeMain([]string{"--svid-cert", "x"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "--addr: required") {
		t.Fatalf("without --addr: exit %d, %s", code, errs.String())
	}
	errs.Reset()
	if code := probeMain([]string{"--no-such-flag"}, &out, &errs); code != 2 {
		t.Fatalf("an unknown flag: exit %d, %s", code, errs.String())
	}
}

// The probe passes only an arbiter showing the probe's own SVID (it runs
// as the arbiter binary, so SPIRE issues it the arbiter's): a probe with
// another workload's SVID of the same trust domain is refused, so no
// other member of the trust domain at the address could pass for the
// arbiter either.
func TestArbiterProbeAcceptsOnlyTheArbitersOwnID(t *testing.T) {
	dir := t.TempDir()
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	pki := filepath.Join(dir, "pki")
	var out, errs bytes.Buffer
	code := probeMain([]string{"--addr", env.Addr, "--svid-cert", filepath.Join(pki, "demo", "svid.pem"), "--svid-key", filepath.Join(pki, "demo", "key.pem"),
		"--bundle", filepath.Join(pki, "bundle.pem"), "--trust-domain", devenv.TrustDomain, "--timeout", "5s"}, &out, &errs)
	if code != 1 || !strings.Contains(errs.String(), "spiffe://"+devenv.TrustDomain+devenv.Identities["arbiter"]) {
		t.Fatalf("probe holding the demo workload's SVID: exit %d, %q, %s; want 1, naming the ID the server showed", code, out.String(), errs.String())
	}
}
