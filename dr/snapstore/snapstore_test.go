package snapstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/cluster"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var etcdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dr-etcd-")
	if err != nil {
		panic(err)
	}
	if etcdBin, err = cluster.BuildEtcd(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	resourcetest.StopMinIO()
	os.RemoveAll(dir)
	os.Exit(code)
}

// region is a one-cluster region: a 3-member etcd cluster of processes,
// bootstrapped as the coord cluster, and a client of it.
func region(t *testing.T) (context.Context, *cluster.Cluster, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c, err := cluster.Start(ctx, cluster.Config{Bin: etcdBin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := epoch.BootstrapRegion(ctx, cli, snapshot.CoordCluster, nil, 6); err != nil {
		t.Fatal(err)
	}
	return ctx, c, cli
}

func put(t *testing.T, ctx context.Context, cli *clientv3.Client, key, val string) int64 {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Put(pctx, key, val)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// A snapshot taken into the snapshot store comes back whole and restores to a new
// cluster holding exactly the snapshot's revision, its epoch record bound
// to the old cluster ID (so the arbiters seal it), and nothing written
// after it.
func TestASnapshotInTheStoreRestoresToANewSealedCluster(t *testing.T) {
	ctx, c, cli := region(t)
	put(t, ctx, cli, "/sys/shards/map", "v1")
	before := put(t, ctx, cli, "/l/before", "granted before the snapshot")

	file := filepath.Join(t.TempDir(), "coord.db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: "eu-west", Cluster: snapshot.CoordCluster,
		Config: clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
	if err != nil {
		t.Fatal(err)
	}
	if m.Revision < before || m.Epoch == nil || m.Epoch.Epoch != 7 || m.HighestAllocated != 7 || m.Size == 0 || len(m.SHA256) != 64 {
		t.Fatalf("manifest %+v: want revision >= %d, epoch 7, highest allocated 7, a size and a sha256", m, before)
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cli.Get(gctx, lockkey.EpochKey)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	oldID := epoch.FormatID(resp.Header.ClusterId)
	if m.ClusterID != oldID || m.Epoch.ClusterID != oldID {
		t.Fatalf("manifest names cluster %s (epoch bound to %s), want %s", m.ClusterID, m.Epoch.ClusterID, oldID)
	}
	after := put(t, ctx, cli, "/l/after", "granted after the snapshot")

	mio := resourcetest.StartMinIO(t)
	v := keyed(snapstore.Store{Client: mio.Client(t), Region: "eu-west"})
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := v.Put(ctx, m, file)
	if err != nil {
		t.Fatal(err)
	}
	latest, _, err := v.Latest(ctx, snapshot.CoordCluster)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Object != stored.Object || latest.Revision != m.Revision || latest.SHA256 != m.SHA256 {
		t.Fatalf("latest %+v, want the one stored %+v", latest, stored)
	}
	found, err := v.Find(ctx, strings.TrimSuffix(stored.Object, ".db"))
	if err != nil || found.Object != stored.Object {
		t.Fatalf("find %s: %+v, %v", stored.Object, found, err)
	}
	if _, _, err := v.Latest(ctx, "s0"); !errors.Is(err, snapstore.ErrNone) {
		t.Fatalf("latest of a cluster never snapshotted: %v, want ErrNone", err)
	}

	fetched := filepath.Join(t.TempDir(), "fetched.db")
	if err := v.Fetch(ctx, latest, fetched); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(ctx, fetched, nil); err != nil {
		t.Fatal(err)
	}
	rcli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	gctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, found2, err := epoch.Read(gctx, rcli)
	if err != nil || !found2 {
		t.Fatalf("restored epoch record: found %v, %v", found2, err)
	}
	got, err := rcli.Get(gctx, "/l/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	newID := got.Header.ClusterId
	if epoch.FormatID(newID) == oldID {
		t.Fatalf("the restored cluster kept cluster ID %s: nothing would seal it", oldID)
	}
	if !st.Sealed(newID) || st.Epoch != 7 {
		t.Fatalf("restored record %+v on cluster %s: want epoch 7 bound to the old ID %s (sealed)", st.Record, epoch.FormatID(newID), oldID)
	}
	if got.Header.Revision != m.Revision || len(got.Kvs) != 1 || string(got.Kvs[0].Key) != "/l/before" {
		t.Fatalf("restored cluster at revision %d with %d holds: want the snapshot's revision %d (the put at %d is gone) and /l/before alone",
			got.Header.Revision, len(got.Kvs), m.Revision, after)
	}
}

// A snapshot file that is not the one its manifest describes is refused
// on the way in and on the way out.
func TestATamperedSnapshotIsRefused(t *testing.T) {
	ctx, c, _ := region(t)
	file := filepath.Join(t.TempDir(), "coord.db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: "us-east", Cluster: snapshot.CoordCluster,
		Config: clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
	if err != nil {
		t.Fatal(err)
	}
	mio := resourcetest.StartMinIO(t)
	v := keyed(snapstore.Store{Client: mio.Client(t), Region: "us-east"})
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := v.Put(ctx, m, file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	if _, err := v.Put(ctx, m, file); err == nil || !strings.Contains(err.Error(), "is not the snapshot") {
		t.Fatalf("put of a changed file: %v", err)
	}
	// The stored manifest with another file's digest: the fetch refuses
	// and leaves no file behind.
	// (Signed again, as its job would: an unsigned change is refused
	// before any download, TestAForgedNewerSnapshotIsRefusedByName.)
	stored.SHA256 = strings.Repeat("0", 64)
	if err := stored.Sign(testKeys[snapshot.CoordCluster]); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.db")
	if err := v.Fetch(ctx, stored, out); err == nil || !strings.Contains(err.Error(), "is not the snapshot") {
		t.Fatalf("fetch against another digest: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused fetch left %s behind", out)
	}
	if _, _, err := (snapstore.Store{Client: mio.Client(t), Region: "EU_West"}).List(ctx, ""); err == nil || !strings.Contains(err.Error(), "snapshot store region") {
		t.Fatalf("a bad region name: %v", err)
	}
	if _, err := v.Find(ctx, "../coord/x"); err == nil {
		t.Fatal("a path outside a cluster's prefix was accepted")
	}
}

// A snapshot overwritten in the snapshot store (a put by someone holding its
// cluster's storer: S3 has no put-if-absent permission) is still read at
// its first version, which object lock keeps: the overwrite neither
// replaces the snapshot nor makes it unreadable, and it is reported.
// Without first-version reads the name was refused as written twice, so
// one put per name denied every restore of the cluster.
func TestAnOverwrittenSnapshotIsReadAtItsFirstVersionAndNamed(t *testing.T) {
	ctx, c, _ := region(t)
	file := filepath.Join(t.TempDir(), "coord.db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: "us-east", Cluster: snapshot.CoordCluster,
		Config: clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
	if err != nil {
		t.Fatal(err)
	}
	mio := resourcetest.StartMinIO(t)
	cli := mio.Client(t)
	v := keyed(snapstore.Store{Client: cli, Region: "us-east"})
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := v.Put(ctx, m, file)
	if err != nil {
		t.Fatal(err)
	}
	// The overwrite: another file under the same name, with a manifest
	// that matches it, even signed by the cluster's key.
	forged := filepath.Join(t.TempDir(), "forged.db")
	os.WriteFile(forged, []byte("not the snapshot"), 0o600)
	size, digest, _ := snapshot.Digest(forged)
	fm := stored
	fm.Size, fm.SHA256, fm.ObjectVersion = size, digest, ""
	if err := fm.Sign(testKeys[snapshot.CoordCluster]); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(fm)
	bucket := snapstore.Bucket("us-east")
	if _, err := cli.FPutObject(ctx, bucket, stored.Object, forged, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.PutObject(ctx, bucket, strings.TrimSuffix(stored.Object, ".db")+".json", bytes.NewReader(doc), int64(len(doc)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// Other tests share the bucket: look at this snapshot only.
	got, refused, err := v.Latest(ctx, snapshot.CoordCluster)
	if err != nil || got.Object != stored.Object || got.SHA256 != stored.SHA256 {
		t.Fatalf("latest after the overwrite: %s (sha256 %s), %v; want %s at its first version (%s)", got.Object, got.SHA256, err, stored.Object, stored.SHA256)
	}
	named := false
	for _, e := range refused {
		named = named || (errors.Is(e, snapstore.ErrOverwritten) && strings.Contains(e.Error(), strings.TrimSuffix(stored.Object, ".db")))
	}
	if !named {
		t.Errorf("latest after the overwrite noted %v; want %s named as overwritten", refused, stored.Object)
	}
	found, err := v.Find(ctx, stored.Object)
	if err != nil || found.SHA256 != stored.SHA256 {
		t.Fatalf("find after the overwrite: %+v, %v", found, err)
	}
	out := filepath.Join(t.TempDir(), "out.db")
	if err := v.Fetch(ctx, found, out); err != nil {
		t.Fatalf("fetch of the first version: %v", err)
	}
	if err := stored.Verify(out); err != nil {
		t.Fatalf("fetched another file: %v", err)
	}
	// The first version is there, and locked.
	var first string
	for obj := range cli.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: stored.Object, WithVersions: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if !obj.IsLatest {
			first = obj.VersionID
		}
	}
	if first == "" {
		t.Fatal("the first version is gone")
	}
	if err := cli.RemoveObject(ctx, bucket, stored.Object, minio.RemoveObjectOptions{VersionID: first}); err == nil {
		t.Fatal("the locked first version was deleted")
	}
}
