package provider_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/cluster"
	"github.com/lockplane/lockplane/test/hosts"
	"github.com/minio/minio-go/v7"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// restoreRig is what the EtcdRestore tests share: three standby hosts, a
// snapshot store on a real MinIO, and the source region's coord cluster (etcd
// processes with an epoch record) whose snapshots go in the snapshot store.
type restoreRig struct {
	h      *hosts.Harness
	p      *provider.Server
	mio    *resourcetest.MinIO
	v      snapstore.Store
	src    *cluster.Cluster
	cli    *clientv3.Client
	etcd   string
	region string
	// pub is the signing key's text form: r.v signs every snapshot with
	// it, and a restore trusts it (trustedKeys) for every cluster.
	pub string
}

var restoreHosts = []hosts.Spec{{Name: "r1", Address: "10.231.251.11"}, {Name: "r2", Address: "10.231.251.12"}, {Name: "r3", Address: "10.231.251.13"}}

func newRestoreRig(t *testing.T, ctx context.Context) *restoreRig {
	t.Helper()
	if err := hosts.Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	etcdBin, err := filepath.Abs("../../bin/etcd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(etcdBin); err != nil {
		t.Skipf("bin/etcd: %v (make build)", err)
	}
	r := &restoreRig{p: provider.New(), etcd: etcdBin, region: fmt.Sprintf("dr%d", time.Now().UnixNano()%1e9)}
	r.mio = resourcetest.StartMinIO(t)
	priv, pub, err := snapshot.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := snapshot.ParsePrivateKey([]byte(priv))
	if err != nil {
		t.Fatal(err)
	}
	r.pub = pub
	r.v = snapstore.Store{Client: r.mio.Client(t), Region: r.region, Signer: key, Trusted: snapstore.Keys{}}
	if err := r.v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if r.src, err = cluster.Start(ctx, cluster.Config{Bin: etcdBin, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.src.Close)
	if r.cli, err = r.src.Client(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cli.Close() })
	if _, err := epoch.BootstrapRegion(ctx, r.cli, snapshot.CoordCluster, nil, 6); err != nil {
		t.Fatal(err)
	}
	r.put(t, ctx, "/sys/shards/map", "v1")
	r.put(t, ctx, "/sys/classes/payments", "fenced")
	if r.h, err = hosts.Up(ctx, hosts.Config{Dir: t.TempDir(), Prefix: "lptr", Subnet: "10.231.251.0/24", Hosts: restoreHosts}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.h.Down() })
	return r
}

func (r *restoreRig) put(t *testing.T, ctx context.Context, key, val string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.cli.Put(pctx, key, val); err != nil {
		t.Fatal(err)
	}
}

// snap takes a snapshot of the source cluster, as cluster name, into the
// snapshot store, and returns its manifest and file.
func (r *restoreRig) snap(t *testing.T, ctx context.Context, name string) (snapshot.Manifest, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "snap.db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: r.region, Cluster: name,
		Config: clientv3.Config{Endpoints: r.src.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
	if err != nil {
		t.Fatal(err)
	}
	r.trust(name)
	if m, err = r.v.Put(ctx, m, file); err != nil {
		t.Fatal(err)
	}
	return m, file
}

// trust makes the rig's key trusted for cluster when r.v reads.
func (r *restoreRig) trust(cluster string) {
	pub, _ := snapshot.ParsePublicKey(r.pub)
	r.v.Trusted[cluster] = []ed25519.PublicKey{pub}
}

func (r *restoreRig) storeInputs(cluster, snap string) map[string]any {
	return map[string]any{"vaultUrl": "http://" + r.mio.Endpoint, "vaultAccessKey": resourcetest.MinIOUser,
		"vaultSecretKey": resourcetest.MinIOPassword, "region": r.region, "cluster": cluster, "snapshot": snap, "trustedKeys": []any{r.pub}}
}

// peer is a standby host's etcd peer URL.
func peer(host string) string {
	for _, s := range restoreHosts {
		if s.Name == host {
			return "http://" + s.Address + ":2380"
		}
	}
	panic(host)
}

// members are the restored cluster's members: every standby host.
func members() map[string]any {
	out := map[string]any{}
	for _, s := range restoreHosts {
		out[s.Name] = peer(s.Name)
	}
	return out
}

// restoreInputs are host's EtcdRestore of snap of cluster into dir (under
// the host's root).
func (r *restoreRig) restoreInputs(t *testing.T, host, dir, cluster, snap, token string) map[string]any {
	in := r.storeInputs(cluster, snap)
	in["connection"] = target(t, r.h, host)
	in["dataDir"] = filepath.Join(r.h.Host(host).Root, dir)
	in["memberName"] = host
	in["members"] = members()
	in["token"] = token
	return in
}

func (r *restoreRig) create(t *testing.T, kind, name string, in map[string]any) (*pulumirpc.CreateResponse, error) {
	t.Helper()
	if check, err := r.p.Check(context.Background(), &pulumirpc.CheckRequest{Urn: urn(kind, name), News: props(t, in)}); err != nil || len(check.Failures) > 0 {
		t.Fatalf("check %s %s: %v %v", kind, name, err, check.GetFailures())
	}
	return r.p.Create(context.Background(), &pulumirpc.CreateRequest{Urn: urn(kind, name), Properties: props(t, in)})
}

// startEtcd runs bin/etcd on a standby host (in its network namespace, on
// its address) over the data dir a restore made.
func (r *restoreRig) startEtcd(t *testing.T, host, dataDir, token string) {
	t.Helper()
	var initial []string
	for _, s := range restoreHosts {
		initial = append(initial, s.Name+"="+peer(s.Name))
	}
	hh := r.h.Host(host)
	client := "http://" + hh.Address + ":2379"
	logf, err := os.Create(filepath.Join(t.TempDir(), host+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", hh.Namespace, r.etcd, "--name", host, "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer(host), "--initial-advertise-peer-urls", peer(host),
		"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token, "--initial-cluster-state", "new",
		"--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("etcd on %s:\n%s", host, b)
		}
	})
}

func TestEtcdRestoreFromTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := newRestoreRig(t, ctx)

	// Three members of a new cluster restored, one before a newer
	// snapshot reaches the snapshot store and two after, from one resolution of
	// "latest": the snapshot's keys come back, on a new cluster ID, with
	// the old epoch record (so every arbiter seals it).
	t.Run("every member restores the snapshot latest was resolved to, sealed", func(t *testing.T) {
		first, _ := r.snap(t, ctx, snapshot.CoordCluster)
		if first.Epoch == nil || first.Epoch.Epoch != 7 {
			t.Fatalf("the source's manifest: %+v, want epoch 7", first.Epoch)
		}
		token := fmt.Sprintf("restored-%d", time.Now().UnixNano())
		// Every member resolving "latest" on its own is refused.
		bad := r.restoreInputs(t, "r1", "var/lib/etcd/coord", snapshot.CoordCluster, provider.Latest, token)
		if check, _ := r.p.Check(ctx, &pulumirpc.CheckRequest{Urn: urn("EtcdRestore", "x"), News: props(t, bad)}); len(check.GetFailures()) != 1 ||
			!strings.Contains(check.Failures[0].Reason, "resolve it once with a StoreSnapshot") {
			t.Fatalf("latest on a 3-member cluster: %v", check.GetFailures())
		}

		vin := r.storeInputs(snapshot.CoordCluster, provider.Latest)
		chosen, err := r.create(t, "VaultSnapshot", "coord", vin)
		if err != nil {
			t.Fatal(err)
		}
		pin := outputs(t, chosen.Properties)
		if pin["manifest"] != strings.TrimSuffix(first.Object, ".db") || pin["sha256"] != first.SHA256 {
			t.Fatalf("StoreSnapshot chose %v, want the latest, %s", pin, first.Object)
		}
		restoreOf := func(host string, pin map[string]any) map[string]any {
			in := r.restoreInputs(t, host, "var/lib/etcd/coord", snapshot.CoordCluster, pin["manifest"].(string), token)
			in["snapshotSha256"] = pin["sha256"]
			return in
		}
		created := map[string]map[string]any{}
		ins := map[string]map[string]any{}
		ids := map[string]string{}
		do := func(host string, pin map[string]any) {
			ins[host] = restoreOf(host, pin)
			resp, err := r.create(t, "EtcdRestore", host, ins[host])
			if err != nil {
				t.Fatalf("restore %s: %v", host, err)
			}
			created[host], ids[host] = outputs(t, resp.Properties), resp.Id
			st, err := plugin.UnmarshalProperties(resp.Properties, plugin.MarshalOptions{KeepSecrets: true})
			if err != nil || !st["token"].IsSecret() || !st["vaultSecretKey"].IsSecret() {
				t.Fatalf("%s's state: token %v, vaultSecretKey %v (%v), want both secret", host, st["token"], st["vaultSecretKey"], err)
			}
		}
		do("r1", pin)

		// A newer snapshot, holding a key the first does not.
		r.put(t, ctx, "/sys/after", "written after the first snapshot")
		second, _ := r.snap(t, ctx, snapshot.CoordCluster)
		if latest, _, err := r.v.Latest(ctx, snapshot.CoordCluster); err != nil || latest.Object != second.Object {
			t.Fatalf("latest is %s (%v), want the newer %s", latest.Object, err, second.Object)
		}
		// The program runs again (an up that failed half way): a refresh
		// and a diff of the StoreSnapshot keep the first choice.
		read, err := r.p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("VaultSnapshot", "coord"), Id: chosen.Id, Properties: chosen.Properties, Inputs: props(t, vin)})
		if err != nil || read.Id == "" {
			t.Fatalf("refresh of the StoreSnapshot: %v %v", read, err)
		}
		if d, err := r.p.Diff(ctx, &pulumirpc.DiffRequest{Urn: urn("VaultSnapshot", "coord"), Olds: read.Properties, News: props(t, vin)}); err != nil ||
			d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
			t.Fatalf("diff of the StoreSnapshot with its inputs unchanged: %v %v", d, err)
		}
		pin = outputs(t, read.Properties)
		do("r2", pin)
		do("r3", pin)

		for host, out := range created {
			if out["manifest"] != strings.TrimSuffix(first.Object, ".db") || out["revision"] != float64(first.Revision) {
				t.Errorf("%s restored %v at revision %v, want %s at %d: every member must restore the one snapshot", host, out["manifest"], out["revision"],
					first.Object, first.Revision)
			}
			if out["sourceClusterId"] != first.ClusterID || out["epoch"] != float64(7) || out["epochClusterId"] != first.ClusterID ||
				out["clusterId"] == first.ClusterID || out["clusterId"] != created["r1"]["clusterId"] || out["restoredAt"] == "" {
				t.Errorf("%s's outputs %v: want source %s, epoch 7 bound to it, and a new cluster ID shared by every member", host, out, first.ClusterID)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		// etcd's own modes, and no temporary directory left beside it.
		dir := filepath.Join(r.h.Host("r2").Root, "var/lib/etcd/coord")
		if got := run(t, r.h, "r2", "find "+dir+" -type d ! -perm 700 ; find "+dir+" -type f ! -perm 600 ; ls -A "+filepath.Dir(dir)); got != "coord" {
			t.Fatalf("on r2, wrong modes or leftovers: %q", got)
		}

		for _, s := range restoreHosts {
			r.startEtcd(t, s.Name, filepath.Join(r.h.Host(s.Name).Root, "var/lib/etcd/coord"), token)
		}
		var eps []string
		for _, s := range restoreHosts {
			eps = append(eps, "http://"+s.Address+":2379")
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		var got *clientv3.GetResponse
		for deadline := time.Now().Add(time.Minute); ; {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			got, err = cli.Get(gctx, "/sys/", clientv3.WithPrefix())
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond) // the restored members elect a leader: no event to wait on from here
		}
		if err != nil {
			t.Fatalf("the restored cluster does not answer: %v", err)
		}
		keys := map[string]string{}
		for _, kv := range got.Kvs {
			keys[string(kv.Key)] = string(kv.Value)
		}
		if keys["/sys/shards/map"] != "v1" || keys["/sys/classes/payments"] != "fenced" {
			t.Fatalf("the restored keys %v lack the snapshot's", keys)
		}
		if _, ok := keys["/sys/after"]; ok {
			t.Fatal("the restored cluster holds a key of the newer snapshot: a member restored another snapshot")
		}
		newID := epoch.FormatID(got.Header.ClusterId)
		if newID == first.ClusterID || newID != created["r1"]["clusterId"] {
			t.Fatalf("the restored cluster's ID is %s: want the new %s, not the source's %s", newID, created["r1"]["clusterId"], first.ClusterID)
		}
		for _, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err != nil || epoch.FormatID(st.Header.ClusterId) != newID {
				t.Fatalf("member %s: %v, %v: want cluster %s", ep, st, err, newID)
			}
		}
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rec, found, err := epoch.Read(ectx, cli)
		cancel()
		if err != nil || !found || rec.Epoch != 7 || rec.ClusterID != first.ClusterID || !rec.Sealed(got.Header.ClusterId) {
			t.Fatalf("the restored epoch record %+v (found %v, %v): want the snapshot's, epoch 7 bound to %s, so sealed", rec.Record, found, err, first.ClusterID)
		}

		// The running member's data dir is there: no drift, whatever etcd
		// wrote into it. Gone, the resource is gone.
		r1 := func() *pulumirpc.ReadResponse {
			resp, err := r.p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("EtcdRestore", "r1"), Id: ids["r1"], Properties: props(t, created["r1"]), Inputs: props(t, ins["r1"])})
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		if resp := r1(); resp.Id != ids["r1"] {
			t.Fatalf("refresh of a running member's restore: %v", resp)
		}
		// Another snapshot store user is an update; another token a replace.
		news := restoreOf("r1", pin)
		news["vaultSecretKey"] = "rotated"
		if d, err := r.p.Diff(ctx, &pulumirpc.DiffRequest{Urn: urn("EtcdRestore", "r1"), Olds: props(t, created["r1"]), OldInputs: props(t, ins["r1"]),
			News: props(t, news)}); err != nil || len(d.Replaces) != 0 || strings.Join(d.Diffs, ",") != "vaultSecretKey" {
			t.Fatalf("diff of a new snapshot store secret: %v %v", d, err)
		}
		news = restoreOf("r1", pin)
		news["token"] = "another"
		if d, err := r.p.Diff(ctx, &pulumirpc.DiffRequest{Urn: urn("EtcdRestore", "r1"), Olds: props(t, created["r1"]), OldInputs: props(t, ins["r1"]),
			News: props(t, news)}); err != nil || strings.Join(d.Replaces, ",") != "token" {
			t.Fatalf("diff of a new token: %v %v", d, err)
		}
		// Delete leaves the data dir: the member's own resources own it.
		if _, err := r.p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: urn("EtcdRestore", "r1"), Id: ids["r1"], Properties: props(t, created["r1"]), OldInputs: props(t, ins["r1"])}); err != nil {
			t.Fatal(err)
		}
		if resp := r1(); resp.Id != ids["r1"] {
			t.Fatal("delete removed the member's data dir")
		}
		run(t, r.h, "r1", "rm -rf "+filepath.Join(r.h.Host("r1").Root, "var/lib/etcd/coord"))
		if resp := r1(); resp.Id != "" {
			t.Fatalf("refresh of a restore whose data dir is gone: %v, want gone", resp)
		}
	})

	// A data dir that holds anything may be a member's: refused, and left
	// as it was.
	t.Run("a data dir that is not empty is refused and left as it was", func(t *testing.T) {
		r.snap(t, ctx, "full")
		dir := filepath.Join(r.h.Host("r1").Root, "var/lib/etcd/full")
		run(t, r.h, "r1", "mkdir -p "+dir+"/member && echo live > "+dir+"/member/marker")
		pin, err := r.create(t, "VaultSnapshot", "full", r.storeInputs("full", provider.Latest))
		if err != nil {
			t.Fatal(err)
		}
		in := r.restoreInputs(t, "r1", "var/lib/etcd/full", "full", outputs(t, pin.Properties)["manifest"].(string), "full-new")
		_, err = r.create(t, "EtcdRestore", "full", in)
		if err == nil || !strings.Contains(err.Error(), "is not empty") {
			t.Fatalf("a restore into a member's data dir: %v, want it refused", err)
		}
		if got := run(t, r.h, "r1", "cat "+dir+"/member/marker; ls -A "+dir+"/member; ls -A "+dir+"; ls -A "+filepath.Dir(dir)); got != "live\nmarker\nmember\nfull" {
			t.Fatalf("the data dir and its parent after a refused restore: %q, want the marker alone, untouched, and no temporary dir", got)
		}
	})

	// Under the source's own token and peer URLs the restored cluster
	// would have the source's ID, and the epoch record bound to it would
	// serve unsealed.
	t.Run("a token that reproduces the snapshot's cluster ID is refused", func(t *testing.T) {
		r.snap(t, ctx, "same")
		pin, err := r.create(t, "VaultSnapshot", "same", r.storeInputs("same", provider.Latest))
		if err != nil {
			t.Fatal(err)
		}
		in := r.restoreInputs(t, "r2", "var/lib/etcd/same", "same", outputs(t, pin.Properties)["manifest"].(string), r.src.Token())
		old := map[string]any{}
		for _, m := range r.src.Members {
			old[m.Name] = m.Peer
		}
		in["members"], in["memberName"] = old, r.src.Members[0].Name
		_, err = r.create(t, "EtcdRestore", "same", in)
		if err == nil || !strings.Contains(err.Error(), "would serve unsealed") {
			t.Fatalf("a restore under the source's token and URLs: %v, want it refused", err)
		}
		if got := run(t, r.h, "r2", "ls -A "+filepath.Join(r.h.Host("r2").Root, "var/lib/etcd")+" 2>&1 | grep same || echo none"); got != "none" {
			t.Fatalf("a refused restore left %q on the host", got)
		}
	})

	// A snapshot object that is not the one its manifest describes, or a
	// whole snapshot put under the chosen one's name, is refused.
	t.Run("a tampered snapshot is refused", func(t *testing.T) {
		chosen, _ := r.snap(t, ctx, "tamper")
		r.put(t, ctx, "/sys/forged", "x")
		other, otherFile := r.snap(t, ctx, "tamper")
		vin := r.storeInputs("tamper", strings.TrimSuffix(chosen.Object, ".db"))
		pin, err := r.create(t, "VaultSnapshot", "tamper", vin)
		if err != nil {
			t.Fatal(err)
		}
		in := r.restoreInputs(t, "r3", "var/lib/etcd/tamper", "tamper", outputs(t, pin.Properties)["manifest"].(string), "tamper-new")
		in["snapshotSha256"] = outputs(t, pin.Properties)["sha256"]
		bucket := snapstore.Bucket(r.region)
		mc := r.mio.Client(t)
		// The object replaced by another snapshot: its digest is not the
		// manifest's. A plain overwrite leaves a second version, which the
		// snapshot store refuses first (written once); an intruder with the snapshot store's
		// root also removes the locked first version, so only the digests
		// are left to tell.
		replace := func(key string, put func() error) {
			var old []string
			for obj := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
				if obj.Err != nil {
					t.Fatal(obj.Err)
				}
				old = append(old, obj.VersionID)
			}
			if err := put(); err != nil {
				t.Fatal(err)
			}
			for _, v := range old {
				if err := mc.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{VersionID: v, GovernanceBypass: true}); err != nil {
					t.Fatal(err)
				}
			}
		}
		replace(chosen.Object, func() error {
			_, err := mc.FPutObject(ctx, bucket, chosen.Object, otherFile, minio.PutObjectOptions{})
			return err
		})
		_, err = r.create(t, "EtcdRestore", "tamper", in)
		if err == nil || !strings.Contains(err.Error(), "is not the snapshot") {
			t.Fatalf("a restore of a tampered object: %v, want it refused", err)
		}
		// The manifest forged to match, its signature no longer over it:
		// refused as untrusted.
		forged := other
		forged.Object = chosen.Object
		putManifest := func(m snapshot.Manifest) {
			doc, _ := json.Marshal(m)
			replace(strings.TrimSuffix(chosen.Object, ".db")+".json", func() error {
				_, err := mc.PutObject(ctx, bucket, strings.TrimSuffix(chosen.Object, ".db")+".json", bytes.NewReader(doc), int64(len(doc)), minio.PutObjectOptions{})
				return err
			})
		}
		putManifest(forged)
		_, err = r.create(t, "EtcdRestore", "tamper", in)
		if err == nil || !strings.Contains(err.Error(), "untrusted snapshot") {
			t.Fatalf("a restore of a manifest whose signature is not over it: %v, want it refused", err)
		}
		// And signed again with the cluster's own key (a forger who holds
		// it): only the digest chosen tells.
		forged.Signature = nil
		if err := forged.Sign(r.v.Signer); err != nil {
			t.Fatal(err)
		}
		putManifest(forged)
		_, err = r.create(t, "EtcdRestore", "tamper", in)
		if err == nil || !strings.Contains(err.Error(), "not the "+chosen.SHA256+" chosen") {
			t.Fatalf("a restore of a snapshot put under the chosen one's name: %v, want it refused", err)
		}
		if got := run(t, r.h, "r3", "ls -A "+filepath.Join(r.h.Host("r3").Root, "var/lib/etcd")+" 2>&1 | grep tamper || echo none"); got != "none" {
			t.Fatalf("a refused restore left %q on the host", got)
		}
	})
}
