package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/login"
	"github.com/lockplane/lockplane/test/hosts"
)

// rootPassword is the region's etcd root password in these tests: set on
// the region's stack before its first up, and given to its DR stack, as
// an operator keeps it outside the region for the day it is lost.
const rootPassword = "e2e-region-root-password-0123456789"

// pulumiConfig sets a stack's configuration with the repository's Pulumi
// CLI, as an operator would (`pulumi config set`), on the state lockplane
// keeps under .lockplane.
func pulumiConfig(t *testing.T, dir, stack string, args ...string) {
	t.Helper()
	env := append(os.Environ(), "PULUMI_BACKEND_URL=file://"+filepath.Join(dir, ".lockplane", "state"),
		"PULUMI_HOME="+filepath.Join(dir, ".lockplane", "pulumi-home"), "PULUMI_CONFIG_PASSPHRASE=lockplane-local-stack",
		"PULUMI_SKIP_UPDATE_CHECK=true", "PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	os.MkdirAll(filepath.Join(dir, ".lockplane", "state"), 0o700)
	for _, a := range [][]string{{"stack", "select", "--create", stack}, append([]string{"config", "set", "--stack", stack}, args...)} {
		cmd := exec.Command(filepath.Join(dir, "bin", "pulumi"), append(a, "--non-interactive")...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pulumi %s: %v: %s", strings.Join(a[:2], " "), err, out)
		}
	}
}

// keepStackFile restores a stack file when the test ends: config set
// writes into it.
func keepStackFile(t *testing.T, dir, stack string) {
	t.Helper()
	p := filepath.Join(dir, "stacks", "Pulumi."+stack+".yaml")
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(p, orig, 0o644) })
}

// drill is the disaster: the region is gone (destroyed), its snapshots
// are in the vault. The DR stack stands it up on standby hosts from them,
// sealed; two operators of an OpenID provider the arbiters trust advance
// every cluster's epoch; a grant then carries a token above every token
// the region issued before, and the RTO (from the start of the DR up to
// that grant) is printed.
func drill(t *testing.T, dir string, h *hosts.Harness, before []uint64, shardsBefore map[string]any) {
	t.Helper()
	// The operators' provider, on the test hosts' bridge where the DR
	// arbiter reaches it.
	idp, err := devidp.Start(devidp.Config{Addr: h.BridgeAddress() + ":0", Private: true})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	work := t.TempDir()
	caFile := filepath.Join(work, "idp-ca.pem")
	os.WriteFile(caFile, idp.CAPEM(), 0o644)
	keepStackFile(t, dir, "local-dr")
	pulumiConfig(t, dir, "local-dr", "--secret", "lockplane:etcdRootPassword", rootPassword)
	ops, _ := json.Marshal(map[string]any{"issuer": idp.Issuer(), "caFile": caFile, "amr": []string{"otp"}})
	pulumiConfig(t, dir, "local-dr", "lockplane:operators", string(ops))
	t.Cleanup(func() { exec.Command(filepath.Join(dir, "bin", "lockplane"), "destroy", "--stack", "local-dr").Run() })

	start := time.Now()
	var up summary
	out := run(t, dir, "lockplane", "up", "--stack", "local-dr", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &up); err != nil || up.Result != "succeeded" || len(up.Unseal) != 4 {
		t.Fatalf("up --stack local-dr: %s (%v)", out, err)
	}
	restored, _ := up.Outputs["restored"].(map[string]any)
	upTook := time.Since(start)
	t.Logf("DR up: %v in %s; restored %v", up.Changes, upTook.Round(time.Second), restored)

	// Sealed: no grant until the advance.
	cmd := exec.Command(filepath.Join(dir, "bin", "lockctl"), "--profile", up.Profile, "run", "demo/e2e/dr", "--class", "demo", "--wait", "2s", "--", "true")
	cmd.Dir = dir
	if got, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(got), "SEALED") {
		t.Fatalf("a grant from the restored region before the unseal: %v: %s", err, got)
	}

	// Two operators: alice requests, bob approves; coord first.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idFile := map[string]string{}
	for _, who := range []string{"alice", "bob"} {
		tok, err := idp.SignInWithOTP(ctx, who)
		if err != nil {
			t.Fatal(err)
		}
		// As lockctl login caches it.
		b, _ := json.Marshal(login.Token{Issuer: idp.Issuer(), ClientID: idp.ClientID(), Subject: "user-" + who, IDToken: tok,
			Expiry: time.Now().Add(5 * time.Minute)})
		idFile[who] = filepath.Join(work, who+"-token.json")
		os.WriteFile(idFile[who], b, 0o600)
	}
	as := func(who string, args ...string) string {
		return string(run(t, dir, append([]string{"lockctl", "--profile", up.Profile, "--identity", "operator", "--id-token-file", idFile[who]}, args...)...))
	}
	for i, line := range up.Unseal {
		i0 := strings.Index(line, " epoch advance ")
		if i0 < 0 {
			continue
		}
		args := strings.Fields(line[i0+1:])
		// The printed --reason is quoted for a shell: pass it whole.
		for j, a := range args {
			if a == "--reason" {
				args = append(args[:j+1], "DR drill")
				break
			}
		}
		first, _, _ := strings.Cut(as("alice", args...), "\n")
		id := strings.TrimPrefix(first, "request ")
		as("bob", "epoch", "approve", id)
		if i == 0 {
			// Coord advanced, the shard not yet: the shard's epoch record
			// is still the old cluster's, and it stays sealed.
			var st struct {
				Sealed, EpochMissing bool
			}
			got := as("alice", "status", "--cluster", "entity-0", "-o", "json")
			if err := json.Unmarshal([]byte(got), &st); err != nil || !(st.Sealed || st.EpochMissing) {
				t.Fatalf("entity-0 after coord's advance alone: %s (%v), want it sealed", got, err)
			}
			// And lockplane does not call the restore done.
			cmd := exec.Command(filepath.Join(dir, "bin", "lockplane"), "dr", "verify", "--stack", "local-dr")
			cmd.Dir = dir
			if got, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(got), "entity-0 is still sealed") {
				t.Fatalf("dr verify with entity-0 sealed: %v: %s", err, got)
			}
		}
	}

	// lockplane ends the restore: every cluster unsealed above the
	// snapshots' epochs, the first grant, and the RTO.
	var verify struct {
		Clusters []struct {
			Cluster string
			Epoch   uint32
		}
		Grant      struct{ Epoch uint32 }
		RTO        string
		RTOSeconds float64
		First      bool `json:"firstVerification"`
	}
	vout := run(t, dir, "lockplane", "dr", "verify", "--stack", "local-dr", "-o", "json")
	if err := json.Unmarshal(lastLine(vout), &verify); err != nil || !verify.First || len(verify.Clusters) != 2 {
		t.Fatalf("dr verify: %s (%v)", vout, err)
	}
	if top := token.Token(maxToken(before)).Epoch(); verify.Grant.Epoch <= top {
		t.Fatalf("dr verify's grant has epoch %d, not above %d, the highest before the disaster", verify.Grant.Epoch, top)
	}
	// The RTO spans the DR up and ends by now: timed from the up, not
	// from the verify.
	if rto := time.Duration(verify.RTOSeconds * float64(time.Second)); rto < upTook || rto > time.Since(start) {
		t.Fatalf("dr verify's RTO %s: not between the DR up's %s and the %s since it began", rto, upTook, time.Since(start))
	}
	t.Logf("RTO %s (lockplane dr verify: from the start of the DR up to the first grant after the unseal; target under 5m)", verify.RTO)

	// A grant after the unseal: above every token before.
	tokOut := run(t, dir, "lockctl", "--profile", up.Profile, "run", "demo/e2e/dr", "--class", "demo", "--", "sh", "-c", `echo "$LOCKPLANE_TOKEN"`)
	var after uint64
	if err := json.Unmarshal(bytes.TrimSpace(tokOut), &after); err != nil {
		t.Fatalf("token after the unseal: %q (%v)", tokOut, err)
	}
	for _, b := range before {
		if after <= b {
			t.Fatalf("token after the unseal (epoch %d, revision %d) does not exceed one before (epoch %d, revision %d)",
				token.Token(after).Epoch(), token.Token(after).Revision(), token.Token(b).Epoch(), token.Token(b).Revision())
		}
	}

	// The shard map came back from the snapshot, as it was.
	if got := shardMap(t, dir, up.Profile); !reflect.DeepEqual(got, shardsBefore) {
		t.Fatalf("shard map after the restore: %v, before the disaster: %v", got, shardsBefore)
	}
	var down summary
	out = run(t, dir, "lockplane", "destroy", "--stack", "local-dr", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &down); err != nil || down.Changes["delete"] != up.Changes["create"] {
		t.Fatalf("destroy --stack local-dr: %s (%v)", out, err)
	}
}

// shardMap is `lockctl shards -o json` as the operator.
func shardMap(t *testing.T, dir, profile string) map[string]any {
	t.Helper()
	out := run(t, dir, "lockctl", "--profile", profile, "--identity", "operator", "shards", "-o", "json")
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil || len(m) == 0 {
		t.Fatalf("lockctl shards: %s (%v)", out, err)
	}
	return m
}

func maxToken(ts []uint64) uint64 {
	var m uint64
	for _, t := range ts {
		m = max(m, t)
	}
	return m
}
