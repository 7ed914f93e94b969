package provider_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// storeInputs are a StoreBuckets resource of two fresh regions, each of
// clusters coord and entity-0, on the test MinIO (plain http on loopback).
func storeInputs(mio *resourcetest.MinIO) (map[string]any, [2]string) {
	n := fmt.Sprintf("%d", time.Now().UnixNano()%1e12)
	regions := [2]string{"a" + n, "b" + n}
	var rs []any
	for _, r := range regions {
		var cs []any
		for _, c := range []string{"coord", "entity-0"} {
			cs = append(cs, map[string]any{"cluster": c, "storer": storerOf(r, c), "storerPassword": "storer-secret-" + r + "-" + c})
		}
		rs = append(rs, map[string]any{"region": r, "restorer": "restore-" + r, "restorerPassword": "restorer-secret-" + r, "clusters": cs})
	}
	return map[string]any{"url": "http://" + mio.Endpoint, "rootUser": resourcetest.MinIOUser, "rootPassword": resourcetest.MinIOPassword,
		"keepDays": 30, "regions": rs}, regions
}

// storerOf is cluster's storer in region, as the store stack names it.
func storerOf(region, cluster string) string { return "snap-" + region + "-" + cluster }

func storerClient(t *testing.T, mio *resourcetest.MinIO, region, cluster string) *minio.Client {
	return userClient(t, mio, storerOf(region, cluster), "storer-secret-"+region+"-"+cluster)
}

func userClient(t *testing.T, mio *resourcetest.MinIO, user, password string) *minio.Client {
	t.Helper()
	c, err := minio.New(mio.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(user, password, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// storeRefusals tries what a region's users must not do and returns what
// was let through: a cluster's storer erasing or re-ruling its bucket,
// writing or reading another cluster's snapshots, or touching another
// region's; a restorer writing or erasing.
func storeRefusals(ctx context.Context, t *testing.T, mio *resourcetest.MinIO, regions [2]string) []string {
	t.Helper()
	a, b := regions[0], regions[1]
	storer := storerClient(t, mio, a, "coord")
	restorer := userClient(t, mio, "restore-"+a, "restorer-secret-"+a)
	bucketA, bucketB := snapstore.Bucket(a), snapstore.Bucket(b)
	put := func(c *minio.Client, bucket, name string) error {
		_, err := c.PutObject(ctx, bucket, name, bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{})
		return err
	}
	// A snapshot of region b, put by its own storer, for a's storer to try.
	if err := put(storerClient(t, mio, b, "coord"), bucketB, "coord/theirs.db"); err != nil {
		t.Fatalf("b's storer putting into its own bucket: %v", err)
	}
	// And one of a's entity-0, by its own storer.
	if err := put(storerClient(t, mio, a, "entity-0"), bucketA, "entity-0/shard.db"); err != nil {
		t.Fatalf("a's entity-0 storer putting under its own prefix: %v", err)
	}
	st, err := storer.StatObject(ctx, bucketA, "coord/mine.db", minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("a's storer reading back what it put: %v", err)
	}
	governance, tomorrow := minio.Governance, time.Now().Add(24*time.Hour)
	var let []string
	try := func(what string, err error) {
		if err == nil {
			let = append(let, what)
		}
	}
	try("storer deletes its snapshot", storer.RemoveObject(ctx, bucketA, "coord/mine.db", minio.RemoveObjectOptions{}))
	try("storer deletes a version of its snapshot", storer.RemoveObject(ctx, bucketA, "coord/mine.db", minio.RemoveObjectOptions{VersionID: st.VersionID}))
	try("storer suspends versioning", storer.SuspendVersioning(ctx, bucketA))
	try("storer sets a one-day expiry", storer.SetBucketLifecycle(ctx, bucketA, &lifecycle.Configuration{Rules: []lifecycle.Rule{{
		ID: "x", Status: "Enabled", Expiration: lifecycle.Expiration{Days: 1}}}}))
	try("coord's storer puts under entity-0's prefix", put(storer, bucketA, "entity-0/forged.db"))
	try("coord's storer puts outside every cluster's prefix", put(storer, bucketA, "forged.db"))
	_, err = storer.StatObject(ctx, bucketA, "entity-0/shard.db", minio.StatObjectOptions{})
	try("coord's storer reads entity-0's snapshot", err)
	try("entity-0's storer puts under coord's prefix", put(storerClient(t, mio, a, "entity-0"), bucketA, "coord/forged.db"))
	try("storer puts into another region's bucket", put(storer, bucketB, "coord/forged.db"))
	_, err = storer.StatObject(ctx, bucketB, "coord/theirs.db", minio.StatObjectOptions{})
	try("storer reads another region's snapshot", err)
	try("storer deletes another region's snapshot", storer.RemoveObject(ctx, bucketB, "coord/theirs.db", minio.RemoveObjectOptions{}))
	try("storer shortens its snapshot's retention", storer.PutObjectRetention(ctx, bucketA, "coord/mine.db", minio.PutObjectRetentionOptions{
		Mode: &governance, RetainUntilDate: &tomorrow, VersionID: st.VersionID, GovernanceBypass: true}))
	try("restorer puts a snapshot", put(restorer, bucketA, "coord/forged.db"))
	try("restorer deletes a snapshot", restorer.RemoveObject(ctx, bucketA, "coord/mine.db", minio.RemoveObjectOptions{}))
	return let
}

// StoreBuckets makes each region's versioned bucket with its expiry rule,
// per cluster a storer that can put and read back its own cluster's
// snapshots and nothing else (not another cluster's prefix, not another
// region's bucket), and a restorer that can only read them. A broken
// variant (a storer policy of s3:* on its bucket) fails the same check.
func TestStoreBucketsGiveEachRegionUsersThatCannotErase(t *testing.T) {
	mio := resourcetest.StartMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := provider.New()
	in, regions := storeInputs(mio)
	u := urn("VaultBuckets", "snapshots")
	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: u, Properties: props(t, in)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: u, Id: created.Id, Olds: created.Properties, News: props(t, in)}); err != nil {
		t.Fatalf("set up again: %v", err)
	}
	root := mio.Client(t)
	for _, r := range regions {
		v, err := root.GetBucketVersioning(ctx, snapstore.Bucket(r))
		if err != nil || !v.Enabled() {
			t.Fatalf("bucket %s: versioning %+v, %v", snapstore.Bucket(r), v, err)
		}
		rules, err := root.GetBucketLifecycle(ctx, snapstore.Bucket(r))
		if err != nil || len(rules.Rules) == 0 || rules.Rules[0].Expiration.Days != 30 {
			t.Fatalf("bucket %s: lifecycle %+v, %v", snapstore.Bucket(r), rules, err)
		}
	}
	a := regions[0]
	storer := storerClient(t, mio, a, "coord")
	if _, err := storer.PutObject(ctx, snapstore.Bucket(a), "coord/mine.db", bytes.NewReader([]byte("snapshot")), 8, minio.PutObjectOptions{}); err != nil {
		t.Fatalf("the storer putting a snapshot: %v", err)
	}
	restorer := userClient(t, mio, "restore-"+a, "restorer-secret-"+a)
	if _, err := restorer.StatObject(ctx, snapstore.Bucket(a), "coord/mine.db", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("the restorer reading a snapshot: %v", err)
	}
	if let := storeRefusals(ctx, t, mio, regions); len(let) > 0 {
		t.Fatalf("let through:\n%s", strings.Join(let, "\n"))
	}

	// Refresh finds it; a user removed behind its back is drift.
	r, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: u, Id: created.Id, Properties: created.Properties, Inputs: props(t, in)})
	if err != nil || r.Id == "" {
		t.Fatalf("read: %v, %v; want found", r, err)
	}

	// The broken variant: a storer with s3:* on its bucket.
	defer provider.SetStorerPolicy(func(region, _ string) []byte {
		b := "arn:aws:s3:::" + snapstore.Bucket(region)
		return []byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["` + b + `","` + b + `/*"]}]}`)
	})()
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: u, Id: created.Id, Olds: created.Properties, News: props(t, in)}); err != nil {
		t.Fatal(err)
	}
	if _, err := storer.PutObject(ctx, snapstore.Bucket(a), "coord/mine.db", bytes.NewReader([]byte("snapshot")), 8, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if let := storeRefusals(ctx, t, mio, regions); len(let) == 0 {
		t.Fatal("a storer with s3:* was refused everything: the check proves nothing")
	} else {
		t.Logf("the broken variant let through: %v", let)
	}

	// Delete removes the users and keeps the buckets and their snapshots.
	if _, err := storer.PutObject(ctx, snapstore.Bucket(a), "coord/kept.db", bytes.NewReader([]byte("snapshot")), 8, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: u, Id: created.Id, Properties: created.Properties}); err != nil {
		t.Fatal(err)
	}
	if _, err := storer.StatObject(ctx, snapstore.Bucket(a), "coord/kept.db", minio.StatObjectOptions{}); err == nil {
		t.Error("the storer still reads after the resource was deleted")
	}
	if _, err := root.StatObject(ctx, snapstore.Bucket(a), "coord/kept.db", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the snapshot after the resource was deleted: %v; want kept", err)
	}
}
