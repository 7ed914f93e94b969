// Package vault keeps a region's etcd snapshots in MinIO (any S3 store
// with versioning): one bucket per region, versioned, with snapshots
// expired after KeepDays. Each snapshot is two objects under its cluster's
// prefix, the snapshot file and its manifest; the manifest is written
// last, so a listed snapshot is a whole one.
//
// The vault must outlive the region it protects: it lives at the DR site
// (the DR stack's vault host), not beside the clusters it holds.
package vault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// DefaultKeepDays is how long a snapshot is kept when Vault.KeepDays is 0.
const DefaultKeepDays = 30

// ExpireRuleID is the ID of the bucket's lifecycle rule.
const ExpireRuleID = "expire-snapshots"

// Bucket is the vault bucket of a region.
func Bucket(region string) string { return "lockplane-snapshots-" + region }

// A region or cluster name is one path segment of object names and a
// bucket name's tail: lower-case letters, digits and '-'.
var nameRule = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// CheckName refuses a region or cluster name the vault cannot store under.
func CheckName(field, name string) error {
	if !nameRule.MatchString(name) {
		return fmt.Errorf("%s: %q must be 1 to 40 lower-case letters, digits or '-', starting and ending with a letter or digit", field, name)
	}
	return nil
}

// Vault is one region's snapshot bucket.
type Vault struct {
	Client *minio.Client
	Region string
	// KeepDays is how long a snapshot is kept; DefaultKeepDays when 0.
	KeepDays int
}

func (v Vault) bucket() string { return Bucket(v.Region) }

func (v Vault) check() error {
	if v.Client == nil {
		return errors.New("vault: a MinIO client is required")
	}
	return CheckName("vault region", v.Region)
}

// Ensure makes the region's bucket if it is missing, turns versioning on
// and sets the expiry rule: what the deploy step does with MinIO's root
// user. A snapshot job's user only puts and reads objects.
func (v Vault) Ensure(ctx context.Context) error {
	if err := v.check(); err != nil {
		return err
	}
	ok, err := v.Client.BucketExists(ctx, v.bucket())
	if err != nil {
		return fmt.Errorf("vault: bucket %s: %w", v.bucket(), err)
	}
	if !ok {
		if err := v.Client.MakeBucket(ctx, v.bucket(), minio.MakeBucketOptions{}); err != nil &&
			minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
			return fmt.Errorf("vault: make bucket %s: %w", v.bucket(), err)
		}
	}
	if err := v.Client.EnableVersioning(ctx, v.bucket()); err != nil {
		return fmt.Errorf("vault: versioning of %s: %w", v.bucket(), err)
	}
	days := v.KeepDays
	if days <= 0 {
		days = DefaultKeepDays
	}
	rules := lifecycle.NewConfiguration()
	rules.Rules = []lifecycle.Rule{{
		ID: ExpireRuleID, Status: "Enabled",
		Expiration:                  lifecycle.Expiration{Days: lifecycle.ExpirationDays(days)},
		NoncurrentVersionExpiration: lifecycle.NoncurrentVersionExpiration{NoncurrentDays: lifecycle.ExpirationDays(days)},
	}}
	if err := v.Client.SetBucketLifecycle(ctx, v.bucket(), rules); err != nil {
		return fmt.Errorf("vault: lifecycle of %s: %w", v.bucket(), err)
	}
	return nil
}

// objectName is where a snapshot of m's cluster goes: sortable by time.
func objectName(m snapshot.Manifest) string {
	return fmt.Sprintf("%s/%s-r%d", m.Cluster, m.TakenAt.UTC().Format("20060102T150405.000Z"), m.Revision)
}

// Put stores the snapshot at file, described by m, and returns m with its
// object name. The file is checked against m first.
func (v Vault) Put(ctx context.Context, m snapshot.Manifest, file string) (snapshot.Manifest, error) {
	if err := v.check(); err != nil {
		return m, err
	}
	if m.Region != v.Region {
		return m, fmt.Errorf("vault: a snapshot of region %q does not go in region %q's vault", m.Region, v.Region)
	}
	if err := CheckName("cluster", m.Cluster); err != nil {
		return m, err
	}
	if err := m.Verify(file); err != nil {
		return m, err
	}
	m.Object = objectName(m) + ".db"
	if _, err := v.Client.FPutObject(ctx, v.bucket(), m.Object, file, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return m, fmt.Errorf("vault: put %s: %w", m.Object, err)
	}
	doc, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	name := objectName(m) + ".json"
	if _, err := v.Client.PutObject(ctx, v.bucket(), name, bytes.NewReader(doc), int64(len(doc)),
		minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		return m, fmt.Errorf("vault: put %s: %w", name, err)
	}
	return m, nil
}

// List returns the manifests of cluster's snapshots (every cluster's when
// cluster is ""), oldest first.
func (v Vault) List(ctx context.Context, cluster string) ([]snapshot.Manifest, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	prefix := ""
	if cluster != "" {
		if err := CheckName("cluster", cluster); err != nil {
			return nil, err
		}
		prefix = cluster + "/"
	}
	var out []snapshot.Manifest
	for obj := range v.Client.ListObjects(ctx, v.bucket(), minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("vault: list %s: %w", v.bucket(), obj.Err)
		}
		if !strings.HasSuffix(obj.Key, ".json") {
			continue
		}
		m, err := v.manifest(ctx, obj.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b snapshot.Manifest) int {
		if c := a.TakenAt.Compare(b.TakenAt); c != 0 {
			return c
		}
		return strings.Compare(a.Cluster, b.Cluster)
	})
	return out, nil
}

// manifest reads and checks one manifest object.
func (v Vault) manifest(ctx context.Context, name string) (snapshot.Manifest, error) {
	obj, err := v.Client.GetObject(ctx, v.bucket(), name, minio.GetObjectOptions{})
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("vault: get %s: %w", name, err)
	}
	defer obj.Close()
	raw, err := io.ReadAll(io.LimitReader(obj, 1<<20))
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("vault: read %s: %w", name, err)
	}
	var m snapshot.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return snapshot.Manifest{}, fmt.Errorf("vault: %s is not a manifest: %w", name, err)
	}
	if m.Format != snapshot.FormatVersion || m.Region != v.Region || m.Object != strings.TrimSuffix(name, ".json")+".db" {
		return snapshot.Manifest{}, fmt.Errorf("vault: %s is not a manifest of this vault (format %d, region %q, object %q)", name, m.Format, m.Region, m.Object)
	}
	return m, nil
}

// ErrNone means the vault holds no snapshot of a cluster.
var ErrNone = errors.New("vault: no snapshot")

// Latest is the newest snapshot of cluster.
func (v Vault) Latest(ctx context.Context, cluster string) (snapshot.Manifest, error) {
	ms, err := v.List(ctx, cluster)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	if len(ms) == 0 {
		return snapshot.Manifest{}, fmt.Errorf("%w of %s/%s in bucket %s", ErrNone, v.Region, cluster, v.bucket())
	}
	return ms[len(ms)-1], nil
}

// Find is the snapshot whose manifest or snapshot object is named name
// (as List prints it, with or without its .json or .db suffix).
func (v Vault) Find(ctx context.Context, name string) (snapshot.Manifest, error) {
	if err := v.check(); err != nil {
		return snapshot.Manifest{}, err
	}
	base := strings.TrimSuffix(strings.TrimSuffix(name, ".json"), ".db")
	if path.Clean(base) != base || strings.HasPrefix(base, "/") || strings.Count(base, "/") != 1 {
		return snapshot.Manifest{}, fmt.Errorf("vault: %q is not a snapshot name (CLUSTER/TIME-rREVISION)", name)
	}
	return v.manifest(ctx, base+".json")
}

// Fetch downloads m's snapshot to file and verifies it against m.
func (v Vault) Fetch(ctx context.Context, m snapshot.Manifest, file string) error {
	if err := v.check(); err != nil {
		return err
	}
	if err := v.Client.FGetObject(ctx, v.bucket(), m.Object, file, minio.GetObjectOptions{}); err != nil {
		return fmt.Errorf("vault: get %s: %w", m.Object, err)
	}
	if err := m.Verify(file); err != nil {
		os.Remove(file)
		return err
	}
	return nil
}
