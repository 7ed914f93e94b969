// Package snapstore keeps a region's etcd snapshots in MinIO (any S3 store
// with versioning): one bucket per region, versioned, with snapshots
// expired after KeepDays. Each snapshot is two objects under its cluster's
// prefix, the snapshot file and its manifest; the manifest is written
// last, so a listed snapshot is a whole one. Each object is written once,
// never over another (a conditional PUT), and read at its first version.
//
// A manifest is signed by its cluster's snapshot signing key, and every
// read (List, Latest, Find) trusts only manifests signed by a key of
// their cluster given in Store.Trusted: write access to the bucket is not
// enough to make a snapshot a restore will use. A snapshot that is not
// signed, or signed by another key, is refused by name.
//
// The snapshot store must outlive the region it protects: it lives at the DR site
// (the DR stack's snapshot store host), not beside the clusters it holds.
package snapstore

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// DefaultKeepDays is how long a snapshot is kept when Store.KeepDays is 0.
const DefaultKeepDays = 30

// DefaultTransferTimeout bounds moving one snapshot file when
// Store.TransferTimeout is 0: the snapshot job's StoreTimeout, room for a
// backend of gigabytes over a slow link.
const DefaultTransferTimeout = 30 * time.Minute

// ExpireRuleID is the ID of the bucket's lifecycle rule.
const ExpireRuleID = "expire-snapshots"

// Bucket is the snapshot store bucket of a region.
func Bucket(region string) string { return "lockplane-snapshots-" + region }

// A region or cluster name is one path segment of object names and a
// bucket name's tail: lower-case letters, digits and '-'.
var nameRule = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// CheckName refuses a region or cluster name the snapshot store cannot store under.
func CheckName(field, name string) error {
	if !nameRule.MatchString(name) {
		return fmt.Errorf("%s: %q must be 1 to 40 lower-case letters, digits or '-', starting and ending with a letter or digit", field, name)
	}
	return nil
}

// Store is one region's snapshot bucket.
type Store struct {
	Client *minio.Client
	Region string
	// KeepDays is how long a snapshot is kept; DefaultKeepDays when 0.
	// On a versioned bucket an expired snapshot is first hidden behind a
	// delete marker and its data removed KeepDays later, so data lives up
	// to twice as long. Expiry is by age alone: alert on the age of the
	// newest snapshot (a job failing for KeepDays leaves none).
	KeepDays int
	// OpTimeout bounds each call that moves no snapshot file (bucket
	// settings, listing, a manifest); a minute when zero.
	OpTimeout time.Duration
	// TransferTimeout bounds each call that moves a snapshot file: Put's
	// upload of it (and its read-back, when the name is found taken) and
	// Fetch's download; DefaultTransferTimeout when zero. The caller's
	// context may end either sooner.
	TransferTimeout time.Duration
	// Signer signs the manifests Put writes: the snapshot signing key of
	// the cluster whose snapshots this Store puts. Put refuses without it.
	Signer ed25519.PrivateKey
	// Trusted are the public keys manifests are checked against, by
	// cluster: List, Latest, Find and Fetch use only snapshots signed by
	// one of their cluster's keys, and refuse to read without any. A
	// Signer's key is not trusted by holding it: a Store knows no cluster
	// of its own, and a shard's key must never vouch for coord's.
	Trusted Keys
}

// Keys are snapshot signing public keys by cluster name.
type Keys map[string][]ed25519.PublicKey

// ParseKeys reads keys in their text form (snapshot.FormatPublicKey) by
// cluster, naming the first that is not a key.
func ParseKeys(text map[string][]string) (Keys, error) {
	out := Keys{}
	for cluster, keys := range text {
		if err := CheckName("trusted keys: cluster", cluster); err != nil {
			return nil, err
		}
		for i, k := range keys {
			pub, err := snapshot.ParsePublicKey(k)
			if err != nil {
				return nil, fmt.Errorf("trusted keys: %s[%d]: %w", cluster, i, err)
			}
			out[cluster] = append(out[cluster], pub)
		}
	}
	return out, nil
}

// trusted is the keys a manifest of cluster is checked against.
func (v Store) trusted(cluster string) []ed25519.PublicKey { return v.Trusted[cluster] }

// ErrUntrusted means a snapshot's manifest is not signed by a key of its
// cluster: not one a restore may use.
var ErrUntrusted = errors.New("snapstore: untrusted snapshot")

// op is a context for one call that moves no snapshot file.
func (v Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	d := v.OpTimeout
	if d <= 0 {
		d = time.Minute
	}
	return context.WithTimeout(ctx, d)
}

// transfer is a context for one call that moves a snapshot file.
func (v Store) transfer(ctx context.Context) (context.Context, context.CancelFunc) {
	d := v.TransferTimeout
	if d <= 0 {
		d = DefaultTransferTimeout
	}
	return context.WithTimeout(ctx, d)
}

func (v Store) bucket() string { return Bucket(v.Region) }

func (v Store) check() error {
	if v.Client == nil {
		return errors.New("snapstore: a MinIO client is required")
	}
	return CheckName("snapshot store region", v.Region)
}

// Ensure makes the region's bucket if it is missing, turns versioning on
// and sets the expiry rule: what the deploy step does with MinIO's root
// user. A snapshot job's user only puts and reads objects.
func (v Store) Ensure(ctx context.Context) error {
	if err := v.check(); err != nil {
		return err
	}
	ctx, cancel := v.op(ctx)
	defer cancel()
	ok, err := v.Client.BucketExists(ctx, v.bucket())
	if err != nil {
		return fmt.Errorf("snapstore: bucket %s: %w", v.bucket(), err)
	}
	if !ok {
		if err := v.Client.MakeBucket(ctx, v.bucket(), minio.MakeBucketOptions{ObjectLocking: true}); err != nil &&
			minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
			return fmt.Errorf("snapstore: make bucket %s: %w", v.bucket(), err)
		}
	}
	// Object lock: a snapshot's versions cannot be deleted for KeepDays,
	// so one overwritten (by a stolen storer) is still there, and List
	// names the overwrite. It can only be turned on when a bucket is made.
	if lock, _, _, _, err := v.Client.GetObjectLockConfig(ctx, v.bucket()); err != nil || lock != "Enabled" {
		return fmt.Errorf("snapstore: bucket %s has no object lock (%q, %v): a snapshot store bucket must be made with it; move its snapshots to a new one", v.bucket(), lock, err)
	}
	if err := v.Client.EnableVersioning(ctx, v.bucket()); err != nil {
		return fmt.Errorf("snapstore: versioning of %s: %w", v.bucket(), err)
	}
	days := v.KeepDays
	if days <= 0 {
		days = DefaultKeepDays
	}
	mode, validity, unit := minio.Governance, uint(days), minio.Days
	if err := v.Client.SetObjectLockConfig(ctx, v.bucket(), &mode, &validity, &unit); err != nil {
		return fmt.Errorf("snapstore: default retention of %s: %w", v.bucket(), err)
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
		return fmt.Errorf("snapstore: lifecycle of %s: %w", v.bucket(), err)
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
// object name and version. The file is checked against m first. Each
// object is written only if its name is free (If-None-Match: *), so a Put
// leaves one version of each, or fails naming the object that holds
// something else; run again with the same m and file, it succeeds and
// writes nothing new.
func (v Store) Put(ctx context.Context, m snapshot.Manifest, file string) (snapshot.Manifest, error) {
	if err := v.check(); err != nil {
		return m, err
	}
	if m.Region != v.Region {
		return m, fmt.Errorf("snapstore: a snapshot of region %q does not go in region %q's snapshot store", m.Region, v.Region)
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
	if len(v.Signer) != ed25519.PrivateKeySize {
		return m, fmt.Errorf("snapstore: put: no signing key: a snapshot of %s is signed with the cluster's snapshot signing key", m.Cluster)
	}
	f, err := os.Open(file)
	if err != nil {
		return m, err
	}
	defer f.Close()
	m.Object = objectName(m) + ".db"
	db := object{key: m.Object, r: f, size: m.Size, sha256: m.SHA256, contentType: "application/octet-stream"}
	if m.ObjectVersion, err = v.create(ctx, v.transfer, db); err != nil {
		return m, err
	}
	// ObjectVersion is not serialised, and an Ed25519 signature is the
	// same for the same bytes: a Put run again writes the same manifest.
	version := m.ObjectVersion
	if err := m.Sign(v.Signer); err != nil {
		return m, err
	}
	m.ObjectVersion = version
	doc, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	size, sum, err := snapshot.Sum(bytes.NewReader(doc))
	if err != nil {
		return m, err
	}
	manifest := object{key: objectName(m) + ".json", r: bytes.NewReader(doc), size: size, sha256: sum, contentType: "application/json"}
	if _, err := v.create(ctx, v.op, manifest); err != nil {
		return m, err
	}
	return m, nil
}

// object is one object Put writes: its name and content.
type object struct {
	key         string
	r           io.Reader
	size        int64
	sha256      string // of the content, hex
	contentType string
}

// create writes o only if no object has its name (If-None-Match: *), and
// returns the version that holds it. minio-go retries a write whose
// answer was lost, and a retry after the first attempt landed must not
// make a second version, which List would refuse as an overwrite: it
// finds the name taken (412), which is no error when the name holds o.
// bound is the deadline of each call: the put, and the read-back.
func (v Store) create(ctx context.Context, bound func(context.Context) (context.Context, context.CancelFunc), o object) (string, error) {
	// One PUT, never a multipart upload: minio-go sends If-None-Match when
	// it starts one but not when it completes it, so two uploads of one
	// name under way at once would both land. MinIO takes 5 TiB in one PUT.
	opts := minio.PutObjectOptions{ContentType: o.contentType, DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	pctx, cancel := bound(ctx)
	info, err := v.Client.PutObject(pctx, v.bucket(), o.key, o.r, o.size, opts)
	cancel()
	if err == nil {
		return info.VersionID, nil
	}
	if minio.ToErrorResponse(err).StatusCode != http.StatusPreconditionFailed {
		return "", fmt.Errorf("snapstore: put %s: %w", o.key, err)
	}
	rctx, cancel := bound(ctx)
	defer cancel()
	return v.holds(rctx, o)
}

// holds is the version of o's name if that name's one version is o's
// content (same size and SHA-256), and an error naming it if not.
func (v Store) holds(ctx context.Context, o object) (string, error) {
	l, err := v.versions(ctx, o.key)
	if err != nil {
		return "", err
	}
	id, err := l.one(o.key)
	if err != nil {
		return "", err
	}
	obj, err := v.Client.GetObject(ctx, v.bucket(), o.key, minio.GetObjectOptions{VersionID: id})
	if err != nil {
		return "", fmt.Errorf("snapstore: read back %s: %w", o.key, err)
	}
	defer obj.Close()
	// A byte past o's size is enough to tell another object.
	size, sum, err := snapshot.Sum(io.LimitReader(obj, o.size+1))
	if err != nil {
		return "", fmt.Errorf("snapstore: read back %s: %w", o.key, err)
	}
	switch {
	case size > o.size:
		// Only its start was read: its size and digest are not known.
		return "", fmt.Errorf("snapstore: put %s: the name holds another object (over %d bytes; this one is size %d, sha256 %s): refusing to write over it",
			o.key, o.size, o.size, o.sha256)
	case size != o.size || sum != o.sha256:
		return "", fmt.Errorf("snapstore: put %s: the name holds another object (size %d, sha256 %s; this one is size %d, sha256 %s): refusing to write over it",
			o.key, size, sum, o.size, o.sha256)
	}
	return id, nil
}

// List returns the manifests of cluster's snapshots (every cluster's when
// cluster is ""), oldest first, each read at its objects' first versions.
// A snapshot that is not whole (one of its objects expired or missing),
// whose manifest cannot be read or does not describe its own object, or
// is not signed by a trusted key of its cluster or dated after it was
// stored (wrapping ErrUntrusted) is left out and named in skipped, so one
// bad object (a newer format, a forged one) hides nothing else. A listed
// snapshot whose objects were written again since is named in skipped
// too, wrapping ErrOverwritten.
func (v Store) List(ctx context.Context, cluster string) (ms []snapshot.Manifest, skipped []error, err error) {
	if err := v.check(); err != nil {
		return nil, nil, err
	}
	if err := v.checkTrust(cluster); err != nil {
		return nil, nil, err
	}
	prefix := ""
	if cluster != "" {
		if err := CheckName("cluster", cluster); err != nil {
			return nil, nil, err
		}
		prefix = cluster + "/"
	}
	l, err := v.versions(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	for _, base := range l.bases() {
		m, overwritten, err := v.read(ctx, l, base)
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		if overwritten != nil {
			skipped = append(skipped, overwritten)
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

// read is base's manifest with the version of its snapshot object to
// fetch: both objects' first versions.
//
// Each object is read at its first version: Put writes an object once,
// and object lock keeps that version for KeepDays, so a later put over the
// name (a storer's credential is on its cluster's hosts) can neither
// replace a snapshot nor make it unreadable. The manifest's signature and
// the file's digest are checked against that first version, and the
// overwrite is reported (overwritten).
func (v Store) read(ctx context.Context, l listing, base string) (m snapshot.Manifest, overwritten error, err error) {
	db, err := l.first(base + ".db")
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	doc, err := l.first(base + ".json")
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	m, err = v.manifest(ctx, base+".json", doc.id)
	m.ObjectVersion = db.id
	if err == nil && m.TakenAt.After(doc.modified.Add(MaxClockSkew)) {
		// Signed by a key of the cluster, yet dated after it was stored:
		// dated ahead to win Latest, which only a holder of the key can do.
		err = fmt.Errorf("%w %s: taken_at %s is after the snapshot store stored it (%s): refusing it", ErrUntrusted, base,
			m.TakenAt.UTC().Format(time.RFC3339), doc.modified.UTC().Format(time.RFC3339))
	}
	if err == nil && (db.later > 0 || doc.later > 0) {
		overwritten = fmt.Errorf("%w: %s was written again since it was stored (%d later versions of its file, %d of its manifest); its first version, kept under object lock, is what is read",
			ErrOverwritten, base, db.later, doc.later)
	}
	return m, overwritten, err
}

// MaxClockSkew is how far a manifest's taken_at may run ahead of the
// time the snapshot store stored it (the member host's clock against MinIO's).
const MaxClockSkew = 5 * time.Minute

// ErrOverwritten notes a snapshot whose objects were put again after Put
// wrote them: not refused (its first version is read), but someone with
// its cluster's snapshot store credential wrote there, which wants looking into.
var ErrOverwritten = errors.New("snapstore: snapshot overwritten")

// manifest reads version of one manifest object and checks it describes
// that object.
func (v Store) manifest(ctx context.Context, name, version string) (snapshot.Manifest, error) {
	ctx, cancel := v.op(ctx)
	defer cancel()
	obj, err := v.Client.GetObject(ctx, v.bucket(), name, minio.GetObjectOptions{VersionID: version})
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("snapstore: get %s: %w", name, err)
	}
	defer obj.Close()
	raw, err := io.ReadAll(io.LimitReader(obj, 1<<20))
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("snapstore: read %s: %w", name, err)
	}
	var m snapshot.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return snapshot.Manifest{}, fmt.Errorf("snapstore: %s is not a manifest: %w", name, err)
	}
	bad := func(field string, got any, want string) error {
		return fmt.Errorf("snapstore: manifest %s: %s is %v, want %s", name, field, got, want)
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
		return m, fmt.Errorf("snapstore: manifest %s: %w", name, err)
	}
	if err := m.CheckSignature(v.trusted(m.Cluster)); err != nil {
		return m, fmt.Errorf("%w %s: %w: refusing it (a snapshot's manifest is signed by its cluster's snapshot job)", ErrUntrusted, strings.TrimSuffix(name, ".json"), err)
	}
	return m, nil
}

// checkTrust refuses to read snapshots with no key to check them by:
// cluster's, or any cluster's when cluster is "".
func (v Store) checkTrust(cluster string) error {
	if cluster == "" && len(v.Trusted) > 0 || len(v.trusted(cluster)) > 0 {
		return nil
	}
	what := "any cluster"
	if cluster != "" {
		what = "cluster " + cluster
	}
	return fmt.Errorf("snapstore: no trusted snapshot signing key for %s: snapshots are read only against their cluster's keys (the store stack's outputs, docs/dr.md)", what)
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

// ErrNone means the snapshot store holds no snapshot of a cluster.
var ErrNone = errors.New("snapstore: no snapshot")

// Latest is the newest readable snapshot of cluster that a trusted key
// signed. refused names each snapshot left out (List's skipped): one
// newer than the chosen is what a forger would have put there, and the
// caller says so rather than restoring an older one in silence.
func (v Store) Latest(ctx context.Context, cluster string) (m snapshot.Manifest, refused []error, err error) {
	ms, skipped, err := v.List(ctx, cluster)
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	if len(ms) == 0 && len(skipped) > 0 {
		return snapshot.Manifest{}, skipped, fmt.Errorf("%w of %s/%s in bucket %s that can be used (%d refused: %w)", ErrNone, v.Region, cluster, v.bucket(), len(skipped), errors.Join(skipped...))
	}
	if len(ms) == 0 {
		return snapshot.Manifest{}, nil, fmt.Errorf("%w of %s/%s in bucket %s", ErrNone, v.Region, cluster, v.bucket())
	}
	return ms[len(ms)-1], skipped, nil
}

// Find is the snapshot whose manifest or snapshot object is named name
// (as List prints it, with or without its .json or .db suffix).
func (v Store) Find(ctx context.Context, name string) (snapshot.Manifest, error) {
	if err := v.check(); err != nil {
		return snapshot.Manifest{}, err
	}
	base, cluster, err := ParseName(name)
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("snapstore: %w", err)
	}
	if err := v.checkTrust(cluster); err != nil {
		return snapshot.Manifest{}, err
	}
	l, err := v.versions(ctx, base+".")
	if err != nil {
		return snapshot.Manifest{}, err
	}
	m, _, err := v.read(ctx, l, base)
	return m, err
}

// listing is what a listing with versions says of each object under a
// prefix.
type listing map[string]listed

// listed is one object's versions.
type listed struct {
	ids     []string    // its versions' IDs, delete markers aside
	times   []time.Time // when each was written, as ids
	deleted bool        // its latest version is a delete marker: expired (or deleted)
}

// versions lists the versions of each object under prefix.
func (v Store) versions(ctx context.Context, prefix string) (listing, error) {
	lctx, cancel := v.op(ctx)
	defer cancel()
	l := listing{}
	for obj := range v.Client.ListObjects(lctx, v.bucket(), minio.ListObjectsOptions{Prefix: prefix, Recursive: true, WithVersions: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("snapstore: list %s: %w", v.bucket(), obj.Err)
		}
		o := l[obj.Key]
		if obj.IsDeleteMarker {
			o.deleted = o.deleted || obj.IsLatest
		} else {
			o.ids, o.times = append(o.ids, obj.VersionID), append(o.times, obj.LastModified)
		}
		l[obj.Key] = o
	}
	return l, nil
}

// gone is whether key is not there to read: deleted, expired or never
// written.
func (l listing) gone(key string) bool { return l[key].deleted || len(l[key].ids) == 0 }

// one is the version of key when it has exactly one: what Put checks
// when it finds its name taken. It refuses a key that is gone (so a
// snapshot half expired is never offered: it could not be fetched) and
// one written more than once (an overwrite: reads use first).
func (l listing) one(key string) (string, error) {
	part := "snapshot object"
	if strings.HasSuffix(key, ".json") {
		part = "manifest"
	}
	switch ids := l[key].ids; {
	case l.gone(key):
		return "", fmt.Errorf("snapstore: snapshot %s: its %s has expired or is missing (%s has no live version)", snapshotBase(key), part, key)
	case len(ids) > 1:
		return "", fmt.Errorf("snapstore: %s has %d versions: a snapshot is written once, so it was overwritten since; its first version is kept under object lock", key, len(ids))
	default:
		return ids[0], nil
	}
}

// version is one version of an object, the first written, and how many
// were written after it.
type version struct {
	id       string
	modified time.Time
	later    int
}

// first is key's first version, the one Put wrote: refused like one
// refuses when key is gone.
func (l listing) first(key string) (version, error) {
	o := l[key]
	if l.gone(key) {
		_, err := l.one(key)
		return version{}, err
	}
	i := 0
	for j, t := range o.times {
		if !t.After(o.times[i]) { // listed newest first: of equal times, the last
			i = j
		}
	}
	return version{id: o.ids[i], modified: o.times[i], later: len(o.ids) - 1}, nil
}

// bases are the snapshots in l to read or to name: each whose manifest
// was written. A snapshot object with no manifest ever written is a Put
// under way (or one that failed), and a pair both gone expired whole:
// neither is a snapshot, and neither is named.
func (l listing) bases() []string {
	var out []string
	for key := range l {
		base, ok := strings.CutSuffix(key, ".json")
		if ok && !(l.gone(base+".json") && l.gone(base+".db")) {
			out = append(out, base)
		}
	}
	slices.Sort(out)
	return out
}

// snapshotBase is a snapshot's name without its object's suffix.
func snapshotBase(key string) string {
	return strings.TrimSuffix(strings.TrimSuffix(key, ".json"), ".db")
}

// ParseName checks a snapshot's name (as List prints it, with or without
// its .json or .db suffix) and returns it without the suffix, and the
// cluster it is stored under.
func ParseName(name string) (base, cluster string, err error) {
	base = snapshotBase(name)
	cluster, tail, _ := strings.Cut(base, "/")
	if CheckName("cluster", cluster) != nil || !tailRule.MatchString(tail) {
		return "", "", fmt.Errorf("%q is not a snapshot name: want CLUSTER/YYYYMMDDTHHMMSS.mmmZ-rREVISION-DIGEST, as list shows", name)
	}
	return base, cluster, nil
}

// Fetch downloads m's snapshot to file and verifies it against m. It reads
// the version of m.Object that List, Latest or Find read (m.ObjectVersion,
// its first); for a manifest without one (built by hand), the object's
// first version.
func (v Store) Fetch(ctx context.Context, m snapshot.Manifest, file string) error {
	if err := v.check(); err != nil {
		return err
	}
	// A name Put could not have written is refused before any read.
	if _, cluster, err := ParseName(m.Object); err != nil || !strings.HasSuffix(m.Object, ".db") || cluster != m.Cluster {
		return fmt.Errorf("snapstore: fetch: %q is not a snapshot object of cluster %q: want %s/YYYYMMDDTHHMMSS.mmmZ-rREVISION-DIGEST.db, as List sets it", m.Object, m.Cluster, m.Cluster)
	}
	// A manifest built by hand is held to what List holds a stored one to.
	if err := m.CheckSignature(v.trusted(m.Cluster)); err != nil {
		return fmt.Errorf("%w %s: %w: refusing to fetch it", ErrUntrusted, strings.TrimSuffix(m.Object, ".db"), err)
	}
	version := m.ObjectVersion
	if version == "" {
		l, err := v.versions(ctx, m.Object)
		if err != nil {
			return err
		}
		first, err := l.first(m.Object)
		if err != nil {
			return err
		}
		version = first.id
	}
	tctx, cancel := v.transfer(ctx)
	defer cancel()
	if err := v.Client.FGetObject(tctx, v.bucket(), m.Object, file, minio.GetObjectOptions{VersionID: version}); err != nil {
		return fmt.Errorf("snapstore: get %s: %w", m.Object, err)
	}
	if err := m.Verify(file); err != nil {
		os.Remove(file)
		return err
	}
	return nil
}
