package provider_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/devca"
	"github.com/lockplane/lockplane/services/resourcetest"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// On a real host over SSH: a Service whose readiness check never passes
// fails its create within the bounded wait, naming the host, the service
// and its log's last lines; one whose check passes records what answered.
// (Needs the test hosts; ready_internal_test.go runs the same loop and
// scripts locally.)
func TestAServiceThatNeverAnswersFailsItsCreateOnARealHost(t *testing.T) {
	h := harness(t)
	p := provider.New()
	ctx := context.Background()
	state := filepath.Join(h.Host("n1").Root, "run")
	in := map[string]any{"connection": target(t, h, "n1"), "name": "talker", "mode": "supervised", "stateDir": state,
		"command": []any{"/bin/sh", "-c", "echo starting; echo still starting; exec sleep 600"},
		"ready":   map[string]any{"command": []any{"/bin/sh", "-c", "echo nothing at 10.231.252.11:7443; exit 1"}, "timeoutSeconds": 3}}
	start := time.Now()
	_, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("Service", "never"), Properties: props(t, in)})
	if err == nil {
		t.Fatal("a service whose check never passes was created")
	}
	if took := time.Since(start); took > 3*time.Second+provider.ProbeRunTimeout+5*time.Second {
		t.Errorf("failed after %s, want within the 3 s wait", took)
	}
	for _, want := range []string{"10.231.252.11", "service talker", "nothing at 10.231.252.11:7443", "| starting", "| still starting", "stopped again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	// A failed create is in no state: nothing of it may keep running. The
	// stop named the process group it ended; it is gone.
	log, _ := os.ReadFile(filepath.Join(state, "talker.log"))
	m := regexp.MustCompile(`stopping talker \(process group (\d+)\)`).FindSubmatch(log)
	if m == nil {
		t.Fatalf("the failed service's log names no stop:\n%s", log)
	}
	// Running means a member that is not a zombie (one may wait to be
	// reaped a moment longer), as the stop script reckons it.
	if out, _ := exec.Command("ps", "-o", "pid=,stat=,args=", "-s", string(m[1])).Output(); regexp.MustCompile(`(?m)^\s*\d+\s+[^Z\s]`).Match(out) {
		t.Errorf("the failed service's process group %s still runs: it was left running\n%s", m[1], out)
	}
	in["ready"] = map[string]any{"command": []any{"/bin/sh", "-c", "echo 10.231.252.11:7443"}}
	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("Service", "ready"), Properties: props(t, in)})
	if err != nil {
		t.Fatal(err)
	}
	if got := outputs(t, created.Properties)["answered"]; got != "10.231.252.11:7443" {
		t.Fatalf("answered %v, want 10.231.252.11:7443", got)
	}
	if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: urn("Service", "ready"), Id: created.Id, Properties: created.Properties, OldInputs: props(t, in)}); err != nil {
		t.Fatal(err)
	}
}

// An arbiter that cannot get its SVID (no SPIRE agent answers: its entry
// withheld) never serves, so its Service is not created: the create fails
// within the bounded wait, naming the host, the service, what the probe
// said and the arbiter's own last log lines. This is what keeps `up` from
// reporting a region that does not serve.
func TestAnArbiterWithoutItsSVIDFailsItsCreate(t *testing.T) {
	bin, err := filepath.Abs("../../bin/arbiter")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		resourcetest.Unavailable(t, bin, "run `make build`", err)
	}
	h := harness(t)
	p := provider.New()
	ctx := context.Background()
	state := filepath.Join(h.Host("n1").Root, "run")
	addr := h.Host("n1").Address + ":17443"
	socket := "unix://" + filepath.Join(state, "no-agent.sock") // nobody listens: the arbiter gets no SVID
	// The probe holds a good SVID of its own, so what fails is the
	// arbiter, not the probe: nothing serves at the address.
	ca, err := devca.New("probe.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pki := t.TempDir()
	bundle, err := ca.WriteBundle(pki)
	if err != nil {
		t.Fatal(err)
	}
	svid, err := ca.WriteSVID(filepath.Join(pki, "arbiter"), "/lockplane/arbiter", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"connection": target(t, h, "n1"), "name": "arbiter", "mode": "supervised", "stateDir": state,
		"command": []any{bin, "--listen", addr, "--spiffe-socket", socket, "--allow-any-workload", "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-without-auth"},
		"ready": map[string]any{"command": []any{bin, "probe", "--addr", addr, "--svid-cert", svid.Cert, "--svid-key", svid.Key, "--bundle", bundle,
			"--trust-domain", "probe.test", "--timeout", "2s"}, "timeoutSeconds": 8}}
	_, err = p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("Service", "arbiter"), Properties: props(t, in)})
	if err == nil {
		t.Fatal("an arbiter without its SVID was created")
	}
	// The arbiter's own log names why: it is still waiting for its SVID.
	for _, want := range []string{h.Host("n1").Address, "service arbiter", "did not pass its readiness check", "health check of " + addr, "waiting for this arbiter's SVID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	t.Logf("refused: %v", err)
	stop := map[string]any{"connection": in["connection"], "name": "arbiter", "mode": "supervised", "stateDir": state, "command": in["command"]}
	p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: urn("Service", "arbiter"), Id: "n1:arbiter", Properties: props(t, stop), OldInputs: props(t, stop)})
}
