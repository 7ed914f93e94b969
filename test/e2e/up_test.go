// Package e2e runs the product as an operator does: `make up`'s steps on
// test hosts made on this machine, a lock through the deployed arbiter, a
// second `up` that changes nothing, and a destroy that leaves no process.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/hosts"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
)

func root(t *testing.T) string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "Pulumi.yaml")); err == nil {
			return dir
		}
		if parent := filepath.Dir(dir); parent != dir {
			dir = parent
			continue
		}
		t.Fatal("no Pulumi.yaml above the test")
	}
}

func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// runTimeout bounds one command of the test: an up of the whole region
// takes a few minutes; a command stuck past this fails the test, whose
// cleanups then tear the stacks and hosts down (a test timeout would not).
const runTimeout = 12 * time.Minute

// run runs a repository binary and returns its stdout, failing on error.
func run(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	return runEnv(t, dir, nil, args...)
}

// runEnv is run with env added to the environment.
func runEnv(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "bin", args[0]), args[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &errb
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr (tail): %s", strings.Join(args, " "), err, out.String(), tail(errb.String(), 40))
	}
	return out.Bytes()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type summary struct {
	Result  string         `json:"result"`
	Changes map[string]int `json:"changes"`
	Outputs map[string]any `json:"outputs"`
	Profile string         `json:"profile"`
	Unseal  []string       `json:"unseal"`
	// FanInProfile and FanInBootstrap are what up wrote to dial through
	// the fan-in tier.
	FanInProfile   string `json:"fan_in_profile"`
	FanInBootstrap string `json:"fan_in_bootstrap"`
	// Answered is what answered each service's readiness check.
	Answered []struct{ Host, Service, Answered string } `json:"answered"`
}

// answeredBy is what answered service's readiness check on each host
// that runs it.
func (s summary) answeredBy(service string) map[string]string {
	out := map[string]string{}
	for _, a := range s.Answered {
		if a.Service == service {
			out[a.Host] = a.Answered
		}
	}
	return out
}

func TestUpLockNoChangesDestroy(t *testing.T) {
	if testing.Short() {
		t.Skip("the end-to-end test stands up 25 hosts, 14 etcd members, ClickHouse and MinIO")
	}
	if err := hosts.Check(); err != nil {
		unavailable(t, err.Error())
	}
	dir := root(t)
	for _, b := range []string{"lockplane", "lockctl", "testhosts", "pulumi", "pulumi-resource-lockplane", "etcd", "arbiter", "lockplane-node", "lockplane-fanin", "minio", "lockplane-snapshot", "spire-server", "spire-agent"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", b)); err != nil {
			unavailable(t, "bin/"+b+" is missing: run `make build infra-tools minio spire`")
		}
	}
	if !chserver.Installed() {
		unavailable(t, chserver.Bin+" is missing: the local stack's audit host runs it: run `make clickhouse`")
	}
	for _, b := range []string{components.PrometheusBin, components.AlertmanagerBin} {
		if _, err := os.Stat(b); err != nil {
			unavailable(t, b+" is missing: the local stack's monitor host runs it: install Debian's prometheus and prometheus-alertmanager")
		}
	}
	hostsDir := filepath.Join(dir, ".lockplane", "hosts")
	if _, err := os.Stat(filepath.Join(hostsDir, hosts.StateFile)); err == nil {
		unavailable(t, "the local test hosts are up already (make up): run `make down` first")
	}
	run(t, dir, "testhosts", "up", "--stack", "stacks/Pulumi.local.yaml", "--stack", "stacks/Pulumi.local-snapshots.yaml", "--stack", "stacks/Pulumi.local-dr.yaml", "--dir", hostsDir)
	h, err := hosts.Load(hostsDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command(filepath.Join(dir, "bin", "lockplane"), "destroy", "--stack", "local").Run()
		exec.Command(filepath.Join(dir, "bin", "lockplane"), "destroy", "--stack", "local-dr").Run()
		exec.Command(filepath.Join(dir, "bin", "lockplane"), "destroy", "--stack", "local-snapshots").Run()
		h.Down()
	})
	// Runs before the teardown above: a failed drill shows what every
	// service of every host said last, before the hosts and logs are gone.
	t.Cleanup(func() {
		if t.Failed() {
			serviceLogs(t, h)
		}
	})
	// First of all, before the teardown stops everything: no service was
	// signalled by anyone but its own Service resource during the drill.
	t.Cleanup(func() { noOutsideSignals(t, h) })

	// The snapshot store first, in its own stack: the region reads it.
	var storeUp summary
	out := run(t, dir, "lockplane", "up", "--stack", "local-snapshots", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &storeUp); err != nil || storeUp.Result != "succeeded" || storeUp.Outputs["storeUrl"] != "https://10.231.0.30:9000" {
		t.Fatalf("up --stack local-snapshots: %s (%v)", out, err)
	}

	// The region's etcd root password is the operators' to keep (the DR
	// stack needs it): set, as secret configuration, before the first up.
	// So are its operators' provider (restores are unsealed by two).
	keepStackFile(t, dir, "local")
	pulumiConfig(t, dir, "local", "--secret", "lockplane:etcdRootPassword", rootPassword)
	ops := startOperators(t, h)
	pulumiConfig(t, dir, "local", "lockplane:operators", ops.config())

	// Where the local stack's Alertmanager posts: the platform's receiver
	// and the demo namespace's owner's.
	hooks := startWebhooks(t, h)

	var up summary
	out = run(t, dir, "lockplane", "up", "--stack", "local", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &up); err != nil || up.Result != "succeeded" || up.Changes["create"] == 0 {
		t.Fatalf("up: %s (%v)", out, err)
	}
	t.Logf("up: %v; coord cluster %v", up.Changes, up.Outputs["coordClusterId"])
	// up answered only once every arbiter did: its health over mTLS.
	if arbiters := up.answeredBy("arbiter"); len(arbiters) != 2 {
		t.Fatalf("up reported success with %d arbiters answering (%v), want both; everything that answered: %v", len(arbiters), arbiters, up.Answered)
	} else {
		t.Logf("arbiters answered: %v", arbiters)
	}

	// Monitoring: Prometheus on monitor-1 scrapes every etcd member (8),
	// arbiter (2) and snapshot job (8), and itself and Alertmanager.
	prom, am := fmt.Sprint(up.Outputs["prometheusUrl"]), fmt.Sprint(up.Outputs["alertmanagerUrl"])
	if prom != "http://10.231.0.26:9090" || am != "http://10.231.0.26:9093" {
		t.Fatalf("prometheusUrl %s, alertmanagerUrl %s", prom, am)
	}
	awaitTargetsUp(t, prom, 20)

	// A lock through the deployed arbiter: a token of epoch 1.
	tokOut := run(t, dir, "lockctl", "--profile", up.Profile, "run", "demo/e2e/1", "--class", "demo", "--", "sh", "-c", `echo "$LOCKPLANE_TOKEN"`)
	var tok uint64
	if err := json.Unmarshal(bytes.TrimSpace(tokOut), &tok); err != nil || token.Token(tok).Epoch() != 1 || token.Token(tok).Revision() <= 0 {
		t.Fatalf("token from the deployed arbiter: %q (%v)", tokOut, err)
	}

	// The same through the fan-in tier: lockctl routes proxyless through
	// a deployed control plane (xds:///lockplane), which publishes the
	// region's arbiters, with the profile and bootstrap up wrote.
	if eps, _ := up.Outputs["fanInEndpoints"].([]any); len(eps) == 0 || up.FanInProfile == "" || up.FanInBootstrap == "" {
		t.Fatalf("up deployed no fan-in control plane or wrote nothing to dial it: fanInEndpoints %v, profile %q, bootstrap %q",
			up.Outputs["fanInEndpoints"], up.FanInProfile, up.FanInBootstrap)
	}
	fanOut := runEnv(t, dir, []string{"GRPC_XDS_BOOTSTRAP=" + up.FanInBootstrap}, "lockctl", "--profile", up.FanInProfile,
		"run", "demo/e2e/fanin", "--class", "demo", "--", "sh", "-c", `echo "$LOCKPLANE_TOKEN"`)
	if err := json.Unmarshal(bytes.TrimSpace(fanOut), &tok); err != nil || token.Token(tok).Epoch() != 1 {
		t.Fatalf("token through the fan-in tier: %q (%v)", fanOut, err)
	}

	// SPIRE: the arbiters serve with SVIDs their hosts' agents issue (an
	// hour long, signed by SPIRE's CA under the stack's root, which the
	// profile's bundle is), and a workload on app-1 locks with the identity
	// its LockGrant registers there, from that host's agent.
	if socks, _ := up.Outputs["spireWorkloadSockets"].([]any); len(socks) != 1 || up.Outputs["spireServer"] != "10.231.0.25:8081" {
		t.Fatalf("SPIRE: server %v, workload sockets %v; want app-1's", up.Outputs["spireServer"], up.Outputs["spireWorkloadSockets"])
	}
	spireOut := run(t, dir, "lockctl", "--profile", up.Profile, "--identity", "workload", "run", "demo/e2e/spire", "--class", "demo", "--", "sh", "-c", `echo "$LOCKPLANE_TOKEN"`)
	if err := json.Unmarshal(bytes.TrimSpace(spireOut), &tok); err != nil || token.Token(tok).Epoch() != 1 {
		t.Fatalf("token for the workload SPIRE identified: %q (%v)", spireOut, err)
	}
	checkArbiterSVID(t, up.Profile, time.Hour)

	// Audit: the arbiters' tailers carry the lock's grant and release into
	// the audit store (ClickHouse on audit-1), and an operator reads them
	// back through the arbiter.
	if got := up.Outputs["auditStoreUrl"]; got != "http://10.231.0.23:8123" {
		t.Fatalf("auditStoreUrl output %v", got)
	}
	awaitAudit(t, dir, up.Profile, "demo/e2e/1", "grant", "release")

	// A holder killed while it holds: nobody releases, etcd expires its
	// lease a TTL later (demo's is 30 s), and the audit names it an expiry.
	killHolder(t, dir, up.Profile, "demo/e2e/2")
	// Another caller waits for the key until the lease ends, then holds it.
	run(t, dir, "lockctl", "--profile", up.Profile, "run", "demo/e2e/2", "--class", "demo", "--wait", "2m", "--", "true")
	awaitAudit(t, dir, up.Profile, "demo/e2e/2", "grant", "expiry")
	// ... and its namespace's owner is told, not the platform: the tailer
	// counts the expiry, Prometheus fires, Alertmanager routes by owner.
	hooks.await(t, 2*time.Minute, "/demo", "LockplaneExpiriesWithoutRelease", map[string]string{"namespace": "demo", "class": "demo"})
	if hooks.has("/platform", "LockplaneExpiriesWithoutRelease", nil) {
		t.Fatalf("an expiry alert went to the platform's receiver: %v", hooks.posted("/platform"))
	}
	// Every dashboard panel answers, with series: no force-release and no
	// refusal has happened yet.
	checkDashboards(t, prom, "lockplane_force_releases_total", "lockplane_refusals_")

	// The archive: the deploy made its buckets on MinIO (archive-1), with
	// their rules; the arbiters reach it over TLS with the archive's CA,
	// as the archiver.
	if got := up.Outputs["archiveUrl"]; got != "https://10.231.0.24:9000" {
		t.Fatalf("archiveUrl output %v", got)
	}
	awaitArchive(t, h.Host("arbiter-1").Root, "10.231.0.24:9000")
	awaitArchived(t, h.Host("arbiter-1").Root, h.Host("arbiter-2").Root)

	// Snapshots: each cluster's job, elected on its own member hosts,
	// stores one at once (no snapshot yet); `snapshot take` adds one more
	// of each, and every manifest carries the cluster's ID and its epoch
	// record.
	checkSnapshots(t, dir, up.Outputs["coordClusterId"])

	// One shard restored in place from an older snapshot while the rest
	// of the region serves; the entry stays, and the next ups change
	// nothing.
	shardTokens, shardCreated := shardDrill(t, dir, ops, up.Profile, []uint64{tok})

	// promote: within the gate it is recorded as a tag and an output (the
	// stack's config gains lockplane:promotion: restored afterwards);
	// over a gate it exits non-zero with the figures and records nothing.
	stackFile := filepath.Join(dir, "stacks", "Pulumi.local.yaml")
	orig, err := os.ReadFile(stackFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(stackFile, orig, 0o644) })
	cmd := exec.Command(filepath.Join(dir, "bin", "lockplane"), "promote", "--stack", "local", "--ops", "30", "--gate-p99-ms", "0.001", "-o", "json")
	cmd.Dir = dir
	failed, err := cmd.Output()
	var rec struct {
		P99  float64 `json:"acquire_p99_ms"`
		Pass bool    `json:"pass"`
	}
	if err == nil || json.Unmarshal(lastLine(failed), &rec) != nil || rec.Pass || rec.P99 <= 0 {
		t.Fatalf("promote over an impossible gate: err %v, %s", err, failed)
	}
	out = run(t, dir, "lockplane", "promote", "--stack", "local", "--ops", "50", "-o", "json")
	if err := json.Unmarshal(firstLine(out), &rec); err != nil || !rec.Pass {
		t.Fatalf("promote: %s (%v)", out, err)
	}
	t.Logf("promote: acquire p99 %.3f ms through the deployed arbiter", rec.P99)
	if b, _ := os.ReadFile(stackFile); !bytes.Contains(b, []byte("lockplane:promotion")) {
		t.Fatal("the promotion was not recorded in the stack")
	}

	// Nothing changed: the second up touches nothing.
	var again summary
	out = run(t, dir, "lockplane", "up", "--stack", "local", "--expect-no-changes", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &again); err != nil || len(again.Changes) != 1 || again.Changes["same"] == 0 {
		t.Fatalf("second up: %s (%v)", out, err)
	}

	// A change reaches only what depends on it: a new lock class changes
	// the policy file on the two arbiter hosts and nothing else (the
	// arbiters reload it themselves).
	policyFile := filepath.Join(dir, "stacks", "local", "policies", "demo.yaml")
	policyOrig, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(policyFile, policyOrig, 0o644) })
	os.WriteFile(policyFile, append(append([]byte{}, policyOrig...), []byte("---\napiVersion: lockplane.io/v1\nkind: LockClass\nmetadata: {name: batch}\n"+
		"spec: {namespace: demo, purpose: efficiency, enforcement: advisory, ttl: 60s, tier: coord}\n")...), 0o644)
	var pv summary
	out = run(t, dir, "lockplane", "preview", "--stack", "local", "-o", "json")
	os.WriteFile(policyFile, policyOrig, 0o644)
	if err := json.Unmarshal(lastLine(out), &pv); err != nil || pv.Changes["update"] != 2 || len(pv.Changes) != 2 {
		t.Fatalf("preview of a new class: %s (%v); want 2 updates (the policy file on each arbiter) and the rest the same", out, err)
	}

	// Drift: a member's etcd killed behind Pulumi's back is found by
	// refresh, and the next up makes that one service again.
	coord5 := h.Host("coord-5")
	pidFile := filepath.Join(coord5.Root, "var/lib/lockplane/run/etcd-coord.pid")
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	// The service's restart loop leads its own process group. (Not
	// /usr/bin/kill: procps-ng 4.0.2 mistakes a negative PID for -1, every
	// process.)
	pgid, err := strconv.Atoi(firstField(string(pid))) // then when it started
	if err != nil || pgid <= 1 {
		t.Fatalf("coord-5's pid file holds %q", pid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill coord-5's etcd: %v", err)
	}
	run(t, dir, "lockplane", "refresh", "--stack", "local", "-o", "json")
	var repair summary
	out = run(t, dir, "lockplane", "up", "--stack", "local", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &repair); err != nil || repair.Changes["create"] != 1 {
		t.Fatalf("up after the drift: %s (%v); want the one service created again", out, err)
	}

	// Two of entity-0's three members cut off: the shard has no quorum,
	// an entity-tier lock fails closed, and the platform is told of both.
	healE2, healE3 := partition(t, h.Host("entity-2")), partition(t, h.Host("entity-3"))
	nq := exec.Command(filepath.Join(dir, "bin", "lockctl"), "--profile", up.Profile, "run", "demo/shard/e2e-no-quorum", "--class", "demo-shard",
		"--wait", "0", "--", "true")
	nq.Dir = dir
	// Refused, NO_QUORUM: whether the grant Txn committed is unknown to
	// the arbiter, so lockctl exits 1 (an error), not 3 (not acquired).
	if out, err := nq.CombinedOutput(); exitCode(err) == 0 || !strings.Contains(string(out), "NO_QUORUM") {
		t.Fatalf("an entity-tier lock with entity-0 partitioned: exit %d, %s; want a NO_QUORUM refusal", exitCode(err), out)
	}
	awaitFiring(t, am, "EtcdInsufficientMembers", map[string]string{"cluster": "entity-0"}, 3*time.Minute)
	awaitFiring(t, am, "LockplaneNoQuorum", map[string]string{"cluster": "entity-0"}, 2*time.Minute)
	hooks.await(t, time.Minute, "/platform", "EtcdInsufficientMembers", map[string]string{"cluster": "entity-0", "team": "platform"})
	hooks.await(t, time.Minute, "/platform", "LockplaneNoQuorum", map[string]string{"cluster": "entity-0"})
	healE2()
	healE3()

	// The last grant before the disaster, after the snapshots: a token a
	// restore could issue again if nothing sealed it.
	lastOut := run(t, dir, "lockctl", "--profile", up.Profile, "run", "demo/e2e/last", "--class", "demo", "--", "sh", "-c", `echo "$LOCKPLANE_TOKEN"`)
	var last uint64
	if err := json.Unmarshal(bytes.TrimSpace(lastOut), &last); err != nil || last <= tok {
		t.Fatalf("the last token before the disaster: %q (%v)", lastOut, err)
	}

	shardsBefore := shardMap(t, dir, up.Profile)

	// The disaster: the region is destroyed; its snapshot store survives.
	var down summary
	out = run(t, dir, "lockplane", "destroy", "--stack", "local", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &down); err != nil || down.Changes["delete"] != up.Changes["create"]+shardCreated {
		t.Fatalf("destroy: %s (%v)", out, err)
	}
	drill(t, dir, ops, append(shardTokens, tok, last), shardsBefore)
	out = run(t, dir, "lockplane", "destroy", "--stack", "local-snapshots", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &down); err != nil || down.Changes["delete"] != storeUp.Changes["create"] {
		t.Fatalf("destroy --stack local-snapshots: %s (%v)", out, err)
	}
	for host, pids := range h.Processes() {
		for _, pid := range pids {
			comm, _ := os.ReadFile(filepath.Join("/proc", itoa(pid), "comm"))
			if name := strings.TrimSpace(string(comm)); name != "sshd" && name != "" {
				t.Errorf("%s still runs %s (pid %d) after destroy", host, name, pid)
			}
		}
	}
}

// snapshots is `lockplane snapshot list|take -o json`.
type snapshots struct {
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	Snapshots []struct {
		Cluster   string `json:"cluster"`
		ClusterID string `json:"cluster_id"`
		Revision  int64  `json:"revision"`
		Object    string `json:"object"`
		Epoch     *struct {
			Epoch     uint32 `json:"epoch"`
			ClusterID string `json:"cluster_id"`
		} `json:"epoch"`
	} `json:"snapshots"`
	Skipped []string `json:"skipped"`
}

func listSnapshots(t *testing.T, dir string) (snapshots, map[string]int) {
	t.Helper()
	var l snapshots
	out := run(t, dir, "lockplane", "snapshot", "list", "--stack", "local", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &l); err != nil || len(l.Skipped) > 0 {
		t.Fatalf("snapshot list: %s (%v)", out, err)
	}
	n := map[string]int{}
	for _, m := range l.Snapshots {
		n[m.Cluster]++
	}
	return l, n
}

// checkSnapshots waits for the scheduled snapshot of each cluster, takes
// one more of each, and checks the manifests.
func checkSnapshots(t *testing.T, dir string, coordID any) {
	t.Helper()
	start := time.Now()
	for {
		_, n := listSnapshots(t, dir)
		if n["coord"] >= 1 && n["entity-0"] >= 1 {
			t.Logf("snapshots: the scheduled ones of coord and entity-0 after %s", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("snapshot list: no scheduled snapshot of every cluster within 2m: %v", n)
		}
		time.Sleep(2 * time.Second)
	}
	before, n0 := listSnapshots(t, dir)
	var took snapshots
	out := run(t, dir, "lockplane", "snapshot", "take", "--stack", "local", "-o", "json")
	if err := json.Unmarshal(lastLine(out), &took); err != nil || len(took.Snapshots) != 2 {
		t.Fatalf("snapshot take: %s (%v)", out, err)
	}
	after, n1 := listSnapshots(t, dir)
	if n1["coord"] != n0["coord"]+1 || n1["entity-0"] != n0["entity-0"]+1 {
		t.Fatalf("snapshot take stored %v more; want one of each cluster (before %d, after %d)", n1, len(before.Snapshots), len(after.Snapshots))
	}
	for _, m := range took.Snapshots {
		if m.Epoch == nil || m.Epoch.Epoch < 1 || m.Epoch.ClusterID != m.ClusterID || m.Revision <= 0 || m.Object == "" {
			t.Errorf("snapshot of %s: manifest %+v: want its epoch record bound to its cluster ID", m.Cluster, m)
		}
		if m.Cluster == "coord" && m.ClusterID != coordID {
			t.Errorf("coord snapshot: cluster ID %s, the stack's coordClusterId %v", m.ClusterID, coordID)
		}
	}
	if after.Bucket != "lockplane-snapshots-local" {
		t.Errorf("bucket %q", after.Bucket)
	}
}

// awaitAudit polls `lockctl audit KEY` as the operator until the key's
// history has every one of kinds: the store is another process, which the
// arbiters reach (and migrate) after they start, and the tailers write to
// it every few seconds.
func awaitAudit(t *testing.T, dir, profile, key string, kinds ...string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	var last string
	for {
		var out, errb bytes.Buffer
		cmd := exec.Command(filepath.Join(dir, "bin", "lockctl"), "--profile", profile, "--identity", "operator", "audit", key, "-o", "json")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &errb
		if err := cmd.Run(); err != nil {
			last = fmt.Sprintf("%v: %s", err, tail(errb.String(), 5))
		} else {
			var r struct {
				Events []struct {
					Kind string `json:"kind"`
					Key  string `json:"key"`
				} `json:"events"`
			}
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("lockctl audit -o json: %v: %s", err, out.String())
			}
			seen := map[string]bool{}
			for _, e := range r.Events {
				if e.Key == key {
					seen[e.Kind] = true
				}
			}
			missing := slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return seen[k] })
			if len(missing) == 0 {
				t.Logf("audit: %v of %s after %s", kinds, key, time.Since(start).Round(time.Millisecond))
				return
			}
			last = fmt.Sprintf("no %v yet: %s", missing, out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit %s: not every one of %v within %s: %s", key, kinds, deadline.Sub(start), last)
		}
		time.Sleep(2 * time.Second)
	}
}

// killHolder runs `lockctl run KEY` until its command holds the lock, then
// kills lockctl and its command at once, without a release.
func killHolder(t *testing.T, dir, profile, key string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "bin", "lockctl"), "--profile", profile, "run", key, "--class", "demo", "--",
		"sh", "-c", "echo held; exec sleep 600")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("lockctl run %s: %q, %v; want its command to say it holds", key, line, err)
	}
}

// awaitArchive reads the arbiter's archive credentials and CA from its
// host, as an operator there would: they are the archiver's, not root's.
// It waits until both buckets have their rules (made at deploy time;
// the archiver may read them) and checks that the archiver cannot
// remove them.
func awaitArchive(t *testing.T, arbiterRoot, endpoint string) {
	t.Helper()
	conf := filepath.Join(arbiterRoot, "etc", "lockplane", "arbiter")
	creds, err := os.ReadFile(filepath.Join(conf, "archive-credentials"))
	if err != nil {
		t.Fatal(err)
	}
	user, password, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(creds)), "archive "), ":")
	if user != "lockplane-archiver" {
		t.Fatalf("the arbiter's archive user is %q, want the archiver, never root", user)
	}
	pem, err := os.ReadFile(filepath.Join(conf, "archive-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("archive-ca.crt holds no certificate")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	cli, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(user, password, ""), Secure: true, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last = archiveReady(ctx, cli)
		cancel()
		if last == nil {
			t.Logf("archive: buckets and rules on %s after %s", endpoint, time.Since(start).Round(time.Millisecond))
			// The archiver cannot undo them.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := cli.SetBucketLifecycle(ctx, "lockplane-history", lifecycle.NewConfiguration())
			if minio.ToErrorResponse(err).Code != "AccessDenied" {
				t.Fatalf("the archiver removing the history's lifecycle rule: %v; want AccessDenied", err)
			}
			if err := cli.RemoveBucket(ctx, "lockplane-records"); minio.ToErrorResponse(err).Code != "AccessDenied" {
				t.Fatalf("the archiver removing the records bucket: %v; want AccessDenied", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("archive on %s not ready within %s: %v", endpoint, deadline.Sub(start), last)
		}
		time.Sleep(2 * time.Second)
	}
}

// awaitArchived waits until the elected arbiter, as the archiver, has
// checked the buckets and exported a day (its log says so), and fails if
// an arbiter found the buckets not ready: they exist before it starts.
func awaitArchived(t *testing.T, arbiterRoots ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		exported := false
		for _, root := range arbiterRoots {
			b, _ := os.ReadFile(filepath.Join(root, "var", "lib", "lockplane", "run", "arbiter.log"))
			if bytes.Contains(b, []byte("buckets are not ready")) {
				t.Fatalf("%s: the archiver found the buckets not ready:\n%s", root, b)
			}
			exported = exported || bytes.Contains(b, []byte(`"archive: exported a day"`))
		}
		if exported {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no arbiter exported a day as the archiver within 2m")
		}
		time.Sleep(2 * time.Second)
	}
}

// archiveReady checks the buckets the deploy makes: history with its
// lifecycle rule, records under object lock.
func archiveReady(ctx context.Context, cli *minio.Client) error {
	rules, err := cli.GetBucketLifecycle(ctx, "lockplane-history")
	if err != nil {
		return fmt.Errorf("history bucket: %w", err)
	}
	if len(rules.Rules) != 1 || rules.Rules[0].ID != archive.HistoryRuleID {
		return fmt.Errorf("history bucket's rules: %+v", rules.Rules)
	}
	lock, mode, validity, unit, err := cli.GetObjectLockConfig(ctx, "lockplane-records")
	if err != nil {
		return fmt.Errorf("records bucket: %w", err)
	}
	if lock != "Enabled" || mode == nil || *mode != minio.Governance || validity == nil || *validity != 7 || unit == nil || *unit != minio.Years {
		return fmt.Errorf("records bucket's lock: %s %v %v %v", lock, mode, validity, unit)
	}
	return nil
}

// checkArbiterSVID dials the profile's arbiter and checks the SVID it
// serves is SPIRE's: at most ttl long, signed by an intermediate (SPIRE's
// CA) that chains to the profile's bundle.
func checkArbiterSVID(t *testing.T, profilePath string, ttl time.Duration) {
	t.Helper()
	p, err := profile.Load(profilePath)
	if err != nil {
		t.Fatal(err)
	}
	src, err := p.Source("")
	if err != nil {
		t.Fatal(err)
	}
	cfg := tlsconfig.MTLSClientConfig(src, src, tlsconfig.AuthorizeID(spiffeid.RequireFromString(p.ServerID)))
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", p.Endpoint, cfg)
	if err != nil {
		t.Fatalf("a TLS connection to the arbiter %s: %v", p.Endpoint, err)
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	leaf := chain[0]
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > ttl+time.Minute || len(chain) < 2 {
		t.Fatalf("the arbiter serves an SVID of %s with %d certificates; want SPIRE's: at most %s, with SPIRE's CA", life, len(chain), ttl)
	}
}

func firstLine(b []byte) []byte {
	line, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte("\n"))
	return line
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

func itoa(i int) string { return strconv.Itoa(i) }
