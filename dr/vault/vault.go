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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// On a versioned bucket an expired snapshot is first hidden behind a
	// delete marker and its data removed KeepDays later, so data lives up
	// to twice as long. Expiry is by age alone: alert on the age of the
	// newest snapshot (a job failing for KeepDays leaves none).
	KeepDays int
	// OpTimeout bounds each call that moves no snapshot file (bucket
	// settings, listing, a manifest); a minute when zero. Put and Fetch
	// move the file and are bounded by the caller's context.
	OpTimeout time.Duration
}

// op is a context for one call that moves no snapshot file.
func (v Vault) op(ctx context.Context) (context.Context, context.CancelFunc) {
	d := v.OpTimeout
	if d <= 0 {
		d = time.Minute
	}
	return context.WithTimeout(ctx, d)
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
	ctx, cancel := v.op(ctx)
	defer cancel()
	ok, err := v.Client.BucketExists(ctx, v.bucket())
	if err != nil {
		return fmt.Errorf("vault: bucket %s: %w", v.bucket(), err)
	}
	if !ok {
		if err := v.Client.MakeBucket(ctx, v.bucket(), minio.MakeBucketOptions{ObjectLocking: true}); err != nil &&
			minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
			return fmt.Errorf("vault: make bucket %s: %w", v.bucket(), err)
		}
	}
	// Object lock: a snapshot's versions cannot be deleted for KeepDays,
	// so one overwritten (by a stolen storer) is still there, and List
	// names the overwrite. It can only be turned on when a bucket is made.
	if lock, _, _, _, err := v.Client.GetObjectLockConfig(ctx, v.bucket()); err != nil || lock != "Enabled" {
		return fmt.Errorf("vault: bucket %s has no object lock (%q, %v): a vault bucket must be made with it; move its snapshots to a new one", v.bucket(), lock, err)
	}
	if err := v.Client.EnableVersioning(ctx, v.bucket()); err != nil {
		return fmt.Errorf("vault: versioning of %s: %w", v.bucket(), err)
	}
	days := v.KeepDays
	if days <= 0 {
		days = DefaultKeepDays
	}
	mode, validity, unit := minio.Governance, uint(days), minio.Days
	if err := v.Client.SetObjectLockConfig(ctx, v.bucket(), &mode, &validity, &unit); err != nil {
		return fmt.Errorf("vault: default retention of %s: %w", v.bucket(), err)
	}
	rules := lifecycle.NewConfiguration()
	rules.Rules = []lifecycle.Rule{{
		ID: ExpireRuleID, Status: "Enabled",
		Expiration:                  lifecycle.Expiration{Days: lifecycle.ExpirationDays(days)},
		NoncurrentVersionExpiration: lifecycle.NoncurrentVersionExpiration{NoncurrentDays: lifecycle.ExpirationDays(days)},
	}, {
		// Delete markers left once their versions are gone would pile up.
		ID: ExpireRuleID + "-markers", Status: "Enabled",
		Expiration: lifecycle.Expiration{DeleteMarker: true},
	}}
	if err := v.Client.SetBucketLifecycle(ctx, v.bucket(), rules); err != nil {
		return fmt.Errorf("vault: lifecycle of %s: %w", v.bucket(), err)
	}
	return nil
}

// objectName is where a snapshot of m's cluster goes: sortable by time,
// and two snapshots of one millisecond and revision (from two members)
// told apart by their digests.
func objectName(m snapshot.Manifest) string {
	return fmt.Sprintf("%s/%s-r%d-%s", m.Cluster, m.TakenAt.UTC().Format("20060102T150405.000Z"), m.Revision, m.SHA256[:12])
}

// tailRule is an object name's part after the cluster.
var tailRule = regexp.MustCompile(`^\d{8}T\d{6}\.\d{3}Z-r\d+-[0-9a-f]{12}$`)

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
	if err := check(m); err != nil {
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
// cluster is ""), oldest first. A manifest that cannot be read or does
// not describe its own object is left out and named in skipped, so one
// bad object (a newer format, a tampered one) hides nothing else.
func (v Vault) List(ctx context.Context, cluster string) (ms []snapshot.Manifest, skipped []error, err error) {
	if err := v.check(); err != nil {
		return nil, nil, err
	}
	prefix := ""
	if cluster != "" {
		if err := CheckName("cluster", cluster); err != nil {
			return nil, nil, err
		}
		prefix = cluster + "/"
	}
	versions, err := v.versions(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for key := range versions {
		if strings.HasSuffix(key, ".json") {
			names = append(names, key)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := writtenOnce(versions, strings.TrimSuffix(name, ".json")); err != nil {
			skipped = append(skipped, err)
			continue
		}
		m, err := v.manifest(ctx, name)
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b snapshot.Manifest) int {
		if c := a.TakenAt.Compare(b.TakenAt); c != 0 {
			return c
		}
		return strings.Compare(a.Object, b.Object)
	})
	return ms, skipped, nil
}

// manifest reads one manifest object and checks it describes that object.
func (v Vault) manifest(ctx context.Context, name string) (snapshot.Manifest, error) {
	ctx, cancel := v.op(ctx)
	defer cancel()
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
	bad := func(field string, got any, want string) error {
		return fmt.Errorf("vault: manifest %s: %s is %v, want %s", name, field, got, want)
	}
	cluster, _, _ := strings.Cut(name, "/")
	switch {
	case m.Format != snapshot.FormatVersion:
		return m, bad("format", m.Format, fmt.Sprint(snapshot.FormatVersion))
	case m.Region != v.Region:
		return m, bad("region", strconv.Quote(m.Region), strconv.Quote(v.Region))
	case m.Cluster != cluster:
		return m, bad("cluster", strconv.Quote(m.Cluster), fmt.Sprintf("%q, the prefix it is stored under", cluster))
	case m.Object != strings.TrimSuffix(name, ".json")+".db":
		return m, bad("object", strconv.Quote(m.Object), "the snapshot beside it, "+strings.TrimSuffix(name, ".json")+".db")
	}
	if err := check(m); err != nil {
		return m, fmt.Errorf("vault: manifest %s: %w", name, err)
	}
	return m, nil
}

// check refuses a manifest with a field no snapshot can have.
func check(m snapshot.Manifest) error {
	switch {
	case m.Revision <= 0:
		return fmt.Errorf("revision is %d, want above 0", m.Revision)
	case m.Size <= 0:
		return fmt.Errorf("size is %d, want above 0", m.Size)
	case !sha256Rule.MatchString(m.SHA256):
		return fmt.Errorf("sha256 is %q, want 64 lower-case hex digits", m.SHA256)
	case m.ClusterID == "":
		return errors.New("cluster_id is empty, want the etcd cluster ID snapshotted")
	case m.TakenAt.IsZero():
		return errors.New("taken_at is empty, want when the snapshot was read")
	}
	return nil
}

var sha256Rule = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ErrNone means the vault holds no snapshot of a cluster.
var ErrNone = errors.New("vault: no snapshot")

// Latest is the newest readable snapshot of cluster.
func (v Vault) Latest(ctx context.Context, cluster string) (snapshot.Manifest, error) {
	ms, _, err := v.List(ctx, cluster)
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
	base, _, err := ParseName(name)
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("vault: %w", err)
	}
	versions, err := v.versions(ctx, base+".")
	if err != nil {
		return snapshot.Manifest{}, err
	}
	if err := writtenOnce(versions, base); err != nil {
		return snapshot.Manifest{}, err
	}
	return v.manifest(ctx, base+".json")
}

// versions counts the versions (delete markers aside) of each object
// under prefix that is not deleted: one whose latest version is a delete
// marker (the expiry rule's) is left out.
func (v Vault) versions(ctx context.Context, prefix string) (map[string]int, error) {
	lctx, cancel := v.op(ctx)
	defer cancel()
	n, deleted := map[string]int{}, map[string]bool{}
	for obj := range v.Client.ListObjects(lctx, v.bucket(), minio.ListObjectsOptions{Prefix: prefix, Recursive: true, WithVersions: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("vault: list %s: %w", v.bucket(), obj.Err)
		}
		if obj.IsDeleteMarker {
			deleted[obj.Key] = deleted[obj.Key] || obj.IsLatest
			continue
		}
		n[obj.Key]++
	}
	for key := range deleted {
		if deleted[key] {
			delete(n, key)
		}
	}
	return n, nil
}

// writtenOnce refuses a snapshot whose objects were written more than
// once: Put writes each exactly once under a name of its own, so a second
// version is an overwrite, and the first, kept under object lock, is what
// to look at, by hand.
func writtenOnce(versions map[string]int, base string) error {
	for _, key := range []string{base + ".db", base + ".json"} {
		if versions[key] > 1 {
			return fmt.Errorf("vault: %s has %d versions: a snapshot is written once, so it was overwritten since; its first version is kept under object lock", key, versions[key])
		}
	}
	return nil
}

// ParseName checks a snapshot's name (as List prints it, with or without
// its .json or .db suffix) and returns it without the suffix, and the
// cluster it is stored under.
func ParseName(name string) (base, cluster string, err error) {
	base = strings.TrimSuffix(strings.TrimSuffix(name, ".json"), ".db")
	cluster, tail, _ := strings.Cut(base, "/")
	if CheckName("cluster", cluster) != nil || !tailRule.MatchString(tail) {
		return "", "", fmt.Errorf("%q is not a snapshot name: want CLUSTER/YYYYMMDDTHHMMSS.mmmZ-rREVISION-DIGEST, as list shows", name)
	}
	return base, cluster, nil
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
