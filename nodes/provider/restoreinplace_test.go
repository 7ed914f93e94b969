package provider_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/pki"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// shard is a three-member etcd cluster run on the standby hosts by the
// provider's own Service resources, as `up` runs an entity shard.
type shard struct {
	r        *restoreRig
	services map[string]map[string]any // host: the Service's inputs
	created  map[string]*pulumirpc.CreateResponse
	eps      []string
}

const shardDir = "var/lib/etcd/entity-0"

func (s *shard) dataDir(host string) string { return filepath.Join(s.r.h.Host(host).Root, shardDir) }

func startShard(t *testing.T, ctx context.Context, r *restoreRig) *shard {
	t.Helper()
	s := &shard{r: r, services: map[string]map[string]any{}, created: map[string]*pulumirpc.CreateResponse{}}
	var initial []string
	for _, h := range restoreHosts {
		initial = append(initial, h.Name+"="+peer(h.Name))
		s.eps = append(s.eps, "http://"+h.Address+":2379")
	}
	for _, h := range restoreHosts {
		client := "http://" + h.Address + ":2379"
		cmd := []any{r.etcd, "--name", h.Name, "--data-dir", s.dataDir(h.Name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer(h.Name), "--initial-advertise-peer-urls", peer(h.Name),
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "entity-0-original", "--initial-cluster-state", "new",
			"--log-level", "warn"}
		s.services[h.Name] = map[string]any{"connection": target(t, r.h, h.Name), "name": "etcd-entity-0", "mode": provider.ModeSupervised,
			"stateDir": filepath.Join(r.h.Host(h.Name).Root, "run"), "command": cmd}
		resp, err := r.create(t, "Service", "etcd-"+h.Name, s.services[h.Name])
		if err != nil {
			t.Fatalf("start etcd on %s: %v", h.Name, err)
		}
		s.created[h.Name] = resp
	}
	t.Cleanup(func() {
		for host, in := range s.services {
			r.p.Delete(context.Background(), &pulumirpc.DeleteRequest{Urn: urn("Service", "etcd-"+host), Id: s.created[host].Id,
				Properties: s.created[host].Properties, OldInputs: props(t, in)})
		}
	})
	return s
}

// restart is what up does after the restore: each member's Service is
// updated with the restore's restoredAt in its triggers.
func (s *shard) restart(t *testing.T, ctx context.Context, restoredAt string) {
	t.Helper()
	for host, in := range s.services {
		olds := s.created[host].Properties
		in["triggers"] = []any{restoredAt}
		resp, err := s.r.p.Update(ctx, &pulumirpc.UpdateRequest{Urn: urn("Service", "etcd-"+host), Id: s.created[host].Id, Olds: olds, News: props(t, in)})
		if err != nil {
			t.Fatalf("restart etcd on %s: %v", host, err)
		}
		s.created[host].Properties = resp.Properties
	}
}

// client waits for the shard to answer, and returns a client and the
// cluster ID every member reports.
func (s *shard) client(t *testing.T, ctx context.Context) (*clientv3.Client, string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var id uint64
	for deadline := time.Now().Add(time.Minute); ; {
		id, err = s.agreed(ctx, cli)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the members elect a leader: no event to wait on from here
	}
	if err != nil {
		t.Fatalf("the shard does not answer: %v", err)
	}
	return cli, epoch.FormatID(id)
}

// agreed is the cluster ID every member reports, once each has a leader.
func (s *shard) agreed(ctx context.Context, cli *clientv3.Client) (uint64, error) {
	var id uint64
	for _, ep := range s.eps {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		switch {
		case err != nil:
			return 0, err
		case st.Leader == 0:
			return 0, fmt.Errorf("%s: no leader", ep)
		case id != 0 && st.Header.ClusterId != id:
			return 0, fmt.Errorf("%s is in cluster %x, another member in %x", ep, st.Header.ClusterId, id)
		}
		id = st.Header.ClusterId
	}
	return id, nil
}

func (s *shard) restoreInputs(t *testing.T, pin map[string]any) map[string]any {
	in := s.r.storeInputs("entity-0", pin["manifest"].(string))
	in["snapshotSha256"] = pin["sha256"]
	var ms []any
	for _, h := range restoreHosts {
		ms = append(ms, map[string]any{"connection": target(t, s.r.h, h.Name), "name": h.Name, "peerUrl": peer(h.Name),
			"dataDir": s.dataDir(h.Name), "service": map[string]any{"name": "etcd-entity-0", "mode": provider.ModeSupervised,
				"stateDir": filepath.Join(s.r.h.Host(h.Name).Root, "run")}})
	}
	in["members"] = ms
	// The shard serves plain http here: the certificate reads its head as
	// it would over TLS, and is dropped for http endpoints.
	ca, err := pki.NewCA("lockplane-etcd-test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(pki.Request{CommonName: "lockplane-deployer", Client: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var eps []any
	for _, ep := range s.eps {
		eps = append(eps, ep)
	}
	in["endpoints"], in["caCertPem"], in["certPem"], in["keyPem"] = eps, string(ca.CertPEM), string(cert), string(key)
	in["revisionBump"] = restoreBump
	return in
}

// restoreBump is the tests' margin above the shard's head.
const restoreBump = 1000

// snapInStore snapshots the running shard into the snapshot store and chooses it
// with a StoreSnapshot, as the program does.
func (s *shard) snapInStore(t *testing.T, ctx context.Context, name string) (snapshot.Manifest, map[string]any) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "shard.db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: s.r.region, Cluster: "entity-0",
		Config: clientv3.Config{Endpoints: s.eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
	if err != nil {
		t.Fatal(err)
	}
	s.r.trust("entity-0")
	if m, err = s.r.v.Put(ctx, m, file); err != nil {
		t.Fatal(err)
	}
	pin, err := s.r.create(t, "VaultSnapshot", name, s.r.storeInputs("entity-0", provider.Latest))
	if err != nil {
		t.Fatal(err)
	}
	return m, outputs(t, pin.Properties)
}

func keys(t *testing.T, ctx context.Context, cli *clientv3.Client) map[string]string {
	t.Helper()
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := cli.Get(gctx, "/test/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range got.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func sealedRecord(t *testing.T, ctx context.Context, cli *clientv3.Client, id string) epoch.State {
	t.Helper()
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, found, err := epoch.Read(ectx, cli)
	if err != nil || !found {
		t.Fatalf("the shard's epoch record: found %v, %v", found, err)
	}
	raw, _ := strconv.ParseUint(id, 16, 64)
	if !rec.Sealed(raw) {
		t.Fatalf("the restored shard (cluster %s) holds epoch %d bound to %s: it would serve unsealed", id, rec.Epoch, rec.ClusterID)
	}
	return rec
}

// A running shard restored in place from an older snapshot comes back
// with the snapshot's keys, under a new cluster ID on every member, and
// sealed; every member's old data dir is kept. Advanced and restored
// again, it is sealed again under yet another ID: a restore's token is
// never reused, or the second restore would come back under the ID the
// advance bound the record to.
func TestAShardIsRestoredInPlace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := newRestoreRig(t, ctx)
	s := startShard(t, ctx, r)
	cli, original := s.client(t, ctx)
	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	boot, err := epoch.Bootstrap(bctx, r.cli, cli, "entity-0", 0)
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	put := func(cli *clientv3.Client, k string) int64 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := cli.Put(pctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	put(cli, "/test/before")
	first, pin := s.snapInStore(t, ctx, "first")
	seen := put(cli, "/test/after")

	in := s.restoreInputs(t, pin)
	for field, bad := range map[string]map[string]any{"cluster: coord is never restored in place": {"cluster": snapshot.CoordCluster},
		`snapshot: "latest"`: {"snapshot": provider.Latest}, "every member of the shard is required": {"members": []any{}}} {
		news := map[string]any{}
		for k, v := range in {
			news[k] = v
		}
		for k, v := range bad {
			news[k] = v
		}
		check, err := r.p.Check(ctx, &pulumirpc.CheckRequest{Urn: urn("ShardRestore", "x"), News: props(t, news)})
		if err != nil || len(check.Failures) != 1 || !strings.Contains(check.Failures[0].Reason, field) {
			t.Errorf("check of %v: %v %v, want %q", bad, check.GetFailures(), err, field)
		}
	}

	resp, err := r.create(t, "ShardRestore", "entity-0", in)
	if err != nil {
		t.Fatalf("restore in place: %v", err)
	}
	out := outputs(t, resp.Properties)
	st, err := plugin.UnmarshalProperties(resp.Properties, plugin.MarshalOptions{KeepSecrets: true})
	if err != nil || !st["token"].IsSecret() || !st["vaultSecretKey"].IsSecret() {
		t.Fatalf("the restore's state: token %v, vaultSecretKey %v (%v), want both secret", st["token"], st["vaultSecretKey"], err)
	}
	if out["manifest"] != strings.TrimSuffix(first.Object, ".db") || out["epoch"] != float64(boot.Epoch) || out["clusterId"] == original {
		t.Fatalf("the restore's outputs %v: want %s, epoch %d, a new cluster ID", out, first.Object, boot.Epoch)
	}
	if head, from := out["headRevision"].(float64), out["revisionsFrom"].(float64); head < float64(seen) || from != head+restoreBump {
		t.Fatalf("head %v, restored revisions from %v: want the head at or above %d, the last write, and the bump %d above it", head, from, seen, restoreBump)
	}
	// Every member was stopped, and its old data dir kept whole.
	for _, h := range restoreHosts {
		if got := services(r.h, h.Name); got != "" {
			t.Errorf("on %s after the restore: %q running, want every member stopped until its service restarts", h.Name, got)
		}
		old, _ := out["replaced"].(map[string]any)[h.Name].(string)
		if !strings.HasPrefix(old, s.dataDir(h.Name)+".replaced-") {
			t.Fatalf("%s's old data dir went to %q", h.Name, old)
		}
		if _, err := os.Stat(filepath.Join(old, "member", "snap", "db")); err != nil {
			t.Errorf("%s's old data dir: %v", h.Name, err)
		}
	}

	s.restart(t, ctx, out["restoredAt"].(string))
	cli2, restored := s.client(t, ctx)
	if restored != out["clusterId"] {
		t.Fatalf("the restarted shard is cluster %s, want the restore's %v", restored, out["clusterId"])
	}
	if got := keys(t, ctx, cli2); got["/test/before"] != "v" || got["/test/after"] != "" {
		t.Fatalf("the restored shard holds %v: want the snapshot's keys, not the one written after it", got)
	}
	rec := sealedRecord(t, ctx, cli2, restored)
	// A watcher resuming after the last revision it saw is told it is
	// compacted, not left waiting for revisions the shard has not reached.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	wr, ok := <-cli2.Watch(wctx, "/", clientv3.WithPrefix(), clientv3.WithRev(seen+1))
	wcancel()
	if !ok || wr.CompactRevision != int64(out["revisionsFrom"].(float64)) {
		t.Fatalf("a watch from revision %d after the restore: %v (compacted at %d), want compacted at %v", seen+1, wr.Err(), wr.CompactRevision, out["revisionsFrom"])
	}

	// The operators' advance unseals it, bound to the restored ID; a
	// snapshot taken since holds that binding.
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	adv, err := epoch.Advance(actx, r.cli, cli2, epoch.Change{Cluster: "entity-0", Expected: rec.Epoch, Reason: "test"})
	acancel()
	if err != nil || adv.Epoch <= boot.Epoch || adv.ClusterID != restored {
		t.Fatalf("advance after the restore: %+v %v, want an epoch above %d bound to %s", adv.State, err, boot.Epoch, restored)
	}
	put(cli2, "/test/unsealed")
	_, pin2 := s.snapInStore(t, ctx, "second")
	resp2, err := r.create(t, "ShardRestore", "entity-0-again", s.restoreInputs(t, pin2))
	if err != nil {
		t.Fatalf("a second restore in place, from a snapshot taken after the advance: %v", err)
	}
	out2 := outputs(t, resp2.Properties)
	s.restart(t, ctx, out2["restoredAt"].(string))
	cli3, again := s.client(t, ctx)
	if again == restored || again == original || again != out2["clusterId"] {
		t.Fatalf("the second restore is cluster %s (first restore %s, original %s, restore said %v): want a new one", again, restored, original, out2["clusterId"])
	}
	if got := keys(t, ctx, cli3); got["/test/unsealed"] != "v" {
		t.Fatalf("the second restore holds %v, want the second snapshot's keys", got)
	}
	sealedRecord(t, ctx, cli3, again)

	// A process that still names a member's data dir after the stop (a
	// member started by hand, or one that outlived SIGKILL; here a
	// stand-in on r2) stops the restore before any data dir moves.
	_, pin3 := s.snapInStore(t, ctx, "third")
	pidFile := filepath.Join(r.h.Host("r2").Root, "run", "stray.pid")
	run(t, r.h, "r2", "setsid sh -c 'echo $$ > "+pidFile+"; sleep 600' stray "+s.dataDir("r2")+" > /dev/null 2>&1 < /dev/null &"+
		" for i in $(seq 50); do [ -s "+pidFile+" ] && break; sleep 0.1; done")
	t.Cleanup(func() { run(t, r.h, "r2", "kill -KILL -$(cat "+pidFile+")") })
	aside := func() (n int) {
		for _, h := range restoreHosts {
			m, _ := filepath.Glob(s.dataDir(h.Name) + ".replaced-*")
			n += len(m)
		}
		return n
	}
	before := aside()
	_, err = r.create(t, "ShardRestore", "entity-0-stray", s.restoreInputs(t, pin3))
	if err == nil || !strings.Contains(err.Error(), "still runs with --data-dir "+s.dataDir("r2")) {
		t.Fatalf("a restore with a process on r2's data dir: %v, want it refused", err)
	}
	if n := aside(); n != before {
		t.Fatalf("%d data dirs moved aside by the refused restore, want none", n-before)
	}
	for _, h := range restoreHosts {
		if _, err := os.Stat(filepath.Join(s.dataDir(h.Name), "member")); err != nil {
			t.Errorf("%s's data dir after the refused restore: %v", h.Name, err)
		}
	}
}
