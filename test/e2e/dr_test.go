package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/login"
	"github.com/lockplane/lockplane/test/hosts"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
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

// operators are two operators, alice and bob, of an OpenID provider on
// the test hosts' bridge, where the arbiters reach it: the two-person
// advances of a restore are theirs.
type operators struct {
	idp    *devidp.Provider
	caFile string
	work   string
}

func startOperators(t *testing.T, h *hosts.Harness) *operators {
	t.Helper()
	idp, err := devidp.Start(devidp.Config{Addr: h.BridgeAddress() + ":0", Private: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })
	o := &operators{idp: idp, work: t.TempDir()}
	o.caFile = filepath.Join(o.work, "idp-ca.pem")
	os.WriteFile(o.caFile, idp.CAPEM(), 0o644)
	return o
}

// config is the stack's lockplane:operators for the provider, naming
// alice and bob: up issues each their own operator SVID, the profile's
// identities alice and bob.
func (o *operators) config() string {
	b, _ := json.Marshal(map[string]any{"issuer": o.idp.Issuer(), "caFile": o.caFile, "amr": []string{"otp"}, "people": []string{"alice", "bob"}})
	return string(b)
}

// signIn signs both operators in, as lockctl login caches their tokens,
// and returns `lockctl --profile profile` as who: who's ID token on who's
// own operator SVID (the profile's identity who), as the arbiter requires.
func (o *operators) signIn(t *testing.T, dir, profile string) func(who string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idFile := map[string]string{}
	for _, who := range []string{"alice", "bob"} {
		tok, err := o.idp.SignInWithOTP(ctx, who)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(login.Token{Issuer: o.idp.Issuer(), ClientID: o.idp.ClientID(), Subject: "user-" + who, IDToken: tok,
			Expiry: time.Now().Add(5 * time.Minute)})
		idFile[who] = filepath.Join(o.work, who+"-token.json")
		os.WriteFile(idFile[who], b, 0o600)
	}
	return func(who string, args ...string) string {
		return string(run(t, dir, append([]string{"lockctl", "--profile", profile, "--identity", who, "--id-token-file", idFile[who]}, args...)...))
	}
}

// advance runs one printed unseal line: alice requests the advance, bob
// approves it. Other lines (the approve reminders) are skipped.
func advance(as func(who string, args ...string) string, line string) bool {
	i0 := strings.Index(line, " epoch advance ")
	if i0 < 0 {
		return false
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
	as("bob", "epoch", "approve", strings.TrimPrefix(first, "request "))
	return true
}

// drill is the disaster: the region is gone (destroyed), its snapshots
// are in the snapshot store. The DR stack stands it up on standby hosts from them,
// sealed; two operators of an OpenID provider the arbiters trust advance
// every cluster's epoch; a grant then carries a token above every token
// the region issued before, and the RTO (from the start of the DR up to
// that grant) is printed.
func drill(t *testing.T, dir string, ops *operators, before []uint64, shardsBefore map[string]any) {
	t.Helper()
	keepStackFile(t, dir, "local-dr")
	pulumiConfig(t, dir, "local-dr", "--secret", "lockplane:etcdRootPassword", rootPassword)
	pulumiConfig(t, dir, "local-dr", "lockplane:operators", ops.config())
	t.Cleanup(func() { exec.Command(filepath.Join(dir, "bin", "lockplane"), "destroy", "--stack", "local-dr").Run() })

	// Someone with write access to the snapshot store left a forged coord snapshot,
	// newer than the genuine one and claiming a far lower epoch.
	forged, genuine := forgeNewerCoordSnapshot(t, dir)

	start := time.Now()
	var up struct {
		summary
		Refused []string `json:"refused"`
	}
	out := run(t, dir, "lockplane", "up", "--stack", "local-dr", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &up); err != nil || up.Result != "succeeded" || len(up.Unseal) != 4 {
		t.Fatalf("up --stack local-dr: %s (%v)", out, err)
	}
	restored, _ := up.Outputs["restored"].(map[string]any)
	upTook := time.Since(start)
	t.Logf("DR up: %v in %s; restored %v; refused %v", up.Changes, upTook.Round(time.Second), restored, up.Refused)

	// The genuine snapshot was restored, the forged one refused by name,
	// and the unseal floor is the genuine one's.
	coord, _ := restored["coord"].(map[string]any)
	if coord["manifest"] != genuine {
		t.Fatalf("DR restored coord from %v, want the genuine %s, not the forged %s", coord["manifest"], genuine, forged)
	}
	// (A snapshot the destroyed region left half written is named too.)
	named := false
	for _, r := range up.Refused {
		named = named || strings.HasPrefix(r, "coord: ") && strings.Contains(r, forged) && strings.Contains(r, snapshot.ErrBadSignature.Error())
	}
	if !named {
		t.Fatalf("refused %q, want the forged %s named, its signature not coord's", up.Refused, forged)
	}
	var floor float64
	for _, c := range restored {
		m, _ := c.(map[string]any)
		h, _ := m["highestAllocated"].(float64)
		e, _ := m["epoch"].(float64)
		floor = max(floor, h, e)
	}
	if !strings.Contains(up.Unseal[0], fmt.Sprintf("--above %d ", int64(floor)+100)) {
		t.Fatalf("unseal %q: want --above %d, the genuine snapshots' highest epoch %v plus 100", up.Unseal[0], int64(floor)+100, floor)
	}

	// Sealed: no grant until the advance.
	refusedSealed(t, dir, up.Profile, "demo/e2e/dr", "demo")

	// Two operators: alice requests, bob approves; coord first.
	as := ops.signIn(t, dir, up.Profile)
	for i, line := range up.Unseal {
		if !advance(as, line) {
			continue
		}
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

// grant takes key in class through lockctl and returns its token.
func grant(t *testing.T, dir, profile, key, class string) uint64 {
	t.Helper()
	out := run(t, dir, "lockctl", "--profile", profile, "run", key, "--class", class, "--", "sh", "-c", `echo "$LOCKPLANE_TOKEN"`)
	var tok uint64
	if err := json.Unmarshal(bytes.TrimSpace(out), &tok); err != nil || tok == 0 {
		t.Fatalf("a grant on %s (class %s): %q (%v)", key, class, out, err)
	}
	return tok
}

// shardDrill restores entity-0 in place from its oldest snapshot while
// the region serves: a grant on the shard after that snapshot, then the
// region's up with lockplane:restoreInPlace. The shard comes back sealed
// (an entity-tier class is refused SEALED) while coord's classes are
// granted on; two operators advance the shard alone; its next grant's
// token exceeds every token before. It returns the tokens it took and
// the resources its up created.
func shardDrill(t *testing.T, dir string, ops *operators, profile string, before []uint64) ([]uint64, int) {
	t.Helper()
	l, _ := listSnapshots(t, dir)
	var from string
	for _, m := range l.Snapshots { // oldest first
		if m.Cluster == "entity-0" {
			from = strings.TrimSuffix(m.Object, ".db")
			break
		}
	}
	// After every snapshot of the shard: a token the restored shard could
	// issue again if nothing sealed it.
	onShard := grant(t, dir, profile, "demo/shard/e2e-1", "demo-shard")
	pulumiConfig(t, dir, "local", "lockplane:restoreInPlace", `{"entity-0":"`+from+`"}`)

	start := time.Now()
	var up summary
	out := run(t, dir, "lockplane", "up", "--stack", "local", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &up); err != nil || up.Result != "succeeded" || len(up.Unseal) != 2 {
		t.Fatalf("up with entity-0 restored in place: %s (%v)", out, err)
	}
	upTook := time.Since(start)
	restored, _ := up.Outputs["restoredInPlace"].(map[string]any)["entity-0"].(map[string]any)
	if restored["manifest"] != from || len(restored["replaced"].(map[string]any)) != 3 {
		t.Fatalf("restoredInPlace %v: want entity-0 from %s, each of its 3 members' old data dir kept", up.Outputs["restoredInPlace"], from)
	}
	for member, old := range restored["replaced"].(map[string]any) {
		if _, err := os.Stat(filepath.Join(old.(string), "member", "snap", "db")); err != nil {
			t.Errorf("%s's old data dir: %v", member, err)
		}
	}
	t.Logf("up restoring entity-0 in place: %v in %s", up.Changes, upTook.Round(time.Second))

	// The shard is sealed; the rest of the region serves.
	refusedSealed(t, dir, profile, "demo/shard/e2e-2", "demo-shard")
	onCoord := grant(t, dir, profile, "demo/e2e/during-shard-restore", "demo")

	as := ops.signIn(t, dir, profile)
	if !advance(as, up.Unseal[0]) || !strings.Contains(up.Unseal[0], "--cluster entity-0") || strings.Contains(up.Unseal[0], "--above") ||
		!strings.Contains(up.Unseal[0], " --identity alice ") {
		t.Fatalf("the printed unseal %q: want entity-0's advance alone, as alice (lockplane:operators.people)", up.Unseal[0])
	}
	// lockplane ends the restore: the shard unsealed above its snapshot's
	// epoch, its first grant taken from it, and the RTO.
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
	vout := run(t, dir, "lockplane", "dr", "verify", "--stack", "local", "--class", "demo-shard", "--key", "demo/shard/e2e-verify", "-o", "json")
	if err := json.Unmarshal(lastLine(vout), &verify); err != nil || !verify.First || len(verify.Clusters) != 1 || verify.Clusters[0].Cluster != "entity-0" ||
		verify.Grant.Epoch != verify.Clusters[0].Epoch {
		t.Fatalf("dr verify of entity-0: %s (%v)", vout, err)
	}
	if rto := time.Duration(verify.RTOSeconds * float64(time.Second)); rto < upTook || rto > time.Since(start) {
		t.Fatalf("dr verify's RTO %s: not between the up's %s and the %s since it began", rto, upTook, time.Since(start))
	}
	after := grant(t, dir, profile, "demo/shard/e2e-2", "demo-shard")
	for _, b := range append(before, onShard) {
		if after <= b {
			t.Fatalf("the shard's token after its restore (epoch %d, revision %d) does not exceed one before (epoch %d, revision %d)",
				token.Token(after).Epoch(), token.Token(after).Revision(), token.Token(b).Epoch(), token.Token(b).Revision())
		}
	}
	t.Logf("entity-0 restored in place from %s: up %s, RTO %s (lockplane dr verify: from the start of the up to the shard's first grant after its advance), epoch %d after, %d before",
		from, upTook.Round(time.Second), verify.RTO, token.Token(after).Epoch(), token.Token(onShard).Epoch())
	return []uint64{onShard, onCoord, after}, up.Changes["create"]
}

// refusedSealed asks for key until the arbiter answers SEALED, failing at
// once if it grants. Right after an up restarted a cluster's members, an
// arbiter may still be reconnecting to them (an attempt times out, or
// meets no quorum): those answers are asked again, for a minute at most.
func refusedSealed(t *testing.T, dir, profile, key, class string) {
	t.Helper()
	var got []byte
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		cmd := exec.Command(filepath.Join(dir, "bin", "lockctl"), "--profile", profile, "run", key, "--class", class, "--wait", "2s", "--", "true")
		cmd.Dir = dir
		var err error
		if got, err = cmd.CombinedOutput(); err == nil {
			t.Fatalf("%s (class %s) was granted before the unseal: %s", key, class, got)
		}
		if strings.Contains(string(got), "SEALED") {
			return
		}
	}
	t.Fatalf("%s (class %s) was not refused SEALED within a minute; last answer: %s", key, class, got)
}

// storeStackOutput is `pulumi stack output --show-secrets --json key` of
// the store stack local-snapshots: what its operator (and no region host)
// can read.
func storeStackOutput(t *testing.T, dir, key string, into any) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "bin", "pulumi"), "stack", "output", "--stack", "local-snapshots", "--show-secrets", "--json", key, "--non-interactive")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL=file://"+filepath.Join(dir, ".lockplane", "state"),
		"PULUMI_HOME="+filepath.Join(dir, ".lockplane", "pulumi-home"), "PULUMI_CONFIG_PASSPHRASE=lockplane-local-stack",
		"PULUMI_SKIP_UPDATE_CHECK=true", "PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pulumi stack output %s of local-snapshots: %v", key, err)
	}
	if err := json.Unmarshal(out, into); err != nil {
		t.Fatalf("pulumi stack output %s of local-snapshots: %v", key, err)
	}
}

// forgeNewerCoordSnapshot is the attack the snapshot store must not let through:
// a host of entity-0 (holding entity-0's signing key) with write access
// to coord's prefix (coord's storer, as a region-wide storer once gave
// every host) copies coord's newest snapshot under a newer name, with a
// manifest claiming highest allocated epoch 1, signed with entity-0's
// key. A DR up with "latest" that believed it would restore it and print
// an unseal floor below every token the region issued. It returns the
// forged snapshot's name and the genuine one's.
func forgeNewerCoordSnapshot(t *testing.T, dir string) (forged, genuine string) {
	t.Helper()
	var url, ca string
	var regions map[string]struct {
		Clusters map[string]struct {
			Storer, StorerPassword, SigningKey, PublicKey string
		}
	}
	storeStackOutput(t, dir, "storeUrl", &url)
	storeStackOutput(t, dir, "storeCaCertPem", &ca)
	storeStackOutput(t, dir, "storeRegions", &regions)
	coord, shard := regions["local"].Clusters["coord"], regions["local"].Clusters["entity-0"]
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		t.Fatal("storeCaCertPem: no certificate")
	}
	host := strings.TrimPrefix(url, "https://")
	cli, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(coord.Storer, coord.StorerPassword, ""), Secure: true,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}})
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := snapstore.ParseKeys(map[string][]string{"coord": {coord.PublicKey}})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := snapshot.ParsePrivateKey([]byte(shard.SigningKey))
	if err != nil {
		t.Fatal(err)
	}
	v := snapstore.Store{Client: cli, Region: "local", Trusted: trusted, Signer: signer}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, _, err := v.Latest(ctx, "coord")
	if err != nil {
		t.Fatalf("coord's newest snapshot: %v", err)
	}
	genuine = strings.TrimSuffix(m.Object, ".db")
	file := filepath.Join(t.TempDir(), "coord.db")
	if err := v.Fetch(ctx, m, file); err != nil {
		t.Fatal(err)
	}
	f := m
	f.Object, f.ObjectVersion, f.Signature = "", "", nil
	f.TakenAt, f.HighestAllocated = m.TakenAt.Add(time.Minute), 1
	if f, err = v.Put(ctx, f, file); err != nil {
		t.Fatalf("put the forged snapshot as coord's storer: %v", err)
	}
	return strings.TrimSuffix(f.Object, ".db"), genuine
}
