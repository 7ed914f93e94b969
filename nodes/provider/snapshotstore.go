package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/audit/archive/minioserver"
	"github.com/minio/minio-go/v7"
)

// StoreBucketsInputs set up a snapshot store's MinIO at deploy time, as
// its root user: for each region it keeps, the versioned bucket with its
// expiry rule (snapstore.Ensure, the one way it is made), per cluster of the
// region a storer (that cluster's snapshot jobs) that may put and read
// snapshots under the cluster's own prefix only, and a restorer (the DR
// stack) that may only read them. None may delete a snapshot, shorten
// its retention or change the bucket's rules. The bucket is
// object-locked, so a storer's overwrite (S3 has no put-only-if-absent
// permission) leaves the first version in place for KeepDays, and
// dr/snapstore refuses a snapshot written twice. A storer confined to its
// cluster cannot even place a forged snapshot of another cluster, and
// every snapshot is signed by its cluster's key besides (docs/dr.md).
type StoreBucketsInputs struct {
	URL          string `json:"url"`
	CACertPem    string `json:"caCertPem,omitempty"`
	RootUser     string `json:"rootUser"`
	RootPassword string `json:"rootPassword"`
	// KeepDays is how long a snapshot is kept (snapstore.Store.KeepDays).
	KeepDays int           `json:"keepDays"`
	Regions  []StoreRegion `json:"regions"`
}

// StoreRegion is one region's bucket and users.
type StoreRegion struct {
	Region           string         `json:"region"`
	Restorer         string         `json:"restorer"`
	RestorerPassword string         `json:"restorerPassword"`
	Clusters         []StoreCluster `json:"clusters"`
	// Storer is the region-wide storer of an older state, read from old
	// inputs only so that an update removes it: a new one is refused.
	Storer         string `json:"storer,omitempty"`
	StorerPassword string `json:"storerPassword,omitempty"`
}

// StoreCluster is one cluster's storer: the only snapshot store user its snapshot
// jobs are given.
type StoreCluster struct {
	Cluster        string `json:"cluster"`
	Storer         string `json:"storer"`
	StorerPassword string `json:"storerPassword"`
}

// StorerPolicy lets one cluster's snapshot jobs put snapshots under
// the cluster's prefix of its region's bucket and read them back
// (snapstore.Put checks what it stored; List and Latest tell the job what is
// there), and nothing else: a host of one cluster cannot place a
// snapshot of another. Reads name the version listed, which S3 allows
// only with s3:GetObjectVersion. Listing covers the bucket (S3 lists by
// bucket); the objects it may read or write are its cluster's only.
func StorerPolicy(region, cluster string) []byte {
	return storePolicy(region, cluster+"/*", "s3:PutObject", "s3:GetObject", "s3:GetObjectVersion", "s3:AbortMultipartUpload")
}

// RestorerPolicy lets a restore list and read a region's snapshots
// (at the versions listed), and nothing else.
func RestorerPolicy(region string) []byte {
	return storePolicy(region, "*", "s3:GetObject", "s3:GetObjectVersion")
}

// storerPolicy is the policy a storer is given; tests replace it.
var storerPolicy = StorerPolicy

// storePolicy allows objectActions on the objects of region's bucket that
// objects (a key pattern) matches, listing, and denies every erasure.
func storePolicy(region, objects string, objectActions ...string) []byte {
	bucket := "arn:aws:s3:::" + snapstore.Bucket(region)
	doc := map[string]any{"Version": "2012-10-17", "Statement": []map[string]any{
		// Versions: List names a snapshot written twice (an overwrite).
		{"Effect": "Allow", "Action": []string{"s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketLocation"}, "Resource": []string{bucket}},
		{"Effect": "Allow", "Action": objectActions, "Resource": []string{bucket + "/" + objects}},
		// Explicit, so no other policy given by mistake can add them.
		{"Effect": "Deny", "Action": []string{"s3:DeleteObject", "s3:DeleteObjectVersion", "s3:DeleteBucket",
			"s3:PutLifecycleConfiguration", "s3:PutBucketVersioning", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy",
			"s3:BypassGovernanceRetention", "s3:PutObjectRetention", "s3:PutBucketObjectLockConfiguration", "s3:PutObjectLegalHold"},
			"Resource": []string{bucket, bucket + "/*"}},
	}}
	b, _ := json.Marshal(doc)
	return b
}

func (in *StoreBucketsInputs) validate() error {
	if err := in.root().validate(); err != nil {
		return err
	}
	switch {
	case in.KeepDays < 1:
		return fmt.Errorf("keepDays: %d must be at least 1", in.KeepDays)
	case len(in.Regions) == 0:
		return errors.New("regions: at least one is required")
	}
	users := map[string]string{in.RootUser: "rootUser"}
	user := func(field, u, password string) error {
		if len(u) < 3 || len(password) < 8 {
			return fmt.Errorf("%s: a user of at least 3 characters with a password of at least 8 is required (MinIO's rule)", field)
		}
		if prev, dup := users[u]; dup {
			return fmt.Errorf("%s: %s is also %s: each region's and cluster's users are its own", field, u, prev)
		}
		users[u] = field
		return nil
	}
	for i, r := range in.Regions {
		if err := snapstore.CheckName(fmt.Sprintf("regions[%d].region", i), r.Region); err != nil {
			return err
		}
		if r.Storer != "" || r.StorerPassword != "" {
			return fmt.Errorf("regions[%d].storer: a region-wide storer could write every cluster's snapshots: give each cluster its own in clusters", i)
		}
		if err := user(fmt.Sprintf("regions[%d].restorer", i), r.Restorer, r.RestorerPassword); err != nil {
			return err
		}
		if len(r.Clusters) == 0 {
			return fmt.Errorf("regions[%d].clusters: every cluster of region %s (coord, entity-0, ...) is required", i, r.Region)
		}
		seen := map[string]bool{}
		for j, c := range r.Clusters {
			field := fmt.Sprintf("regions[%d].clusters[%d]", i, j)
			if err := snapstore.CheckName(field+".cluster", c.Cluster); err != nil {
				return err
			}
			if seen[c.Cluster] {
				return fmt.Errorf("%s.cluster: %s appears twice", field, c.Cluster)
			}
			seen[c.Cluster] = true
			if err := user(field+".storer", c.Storer, c.StorerPassword); err != nil {
				return err
			}
		}
	}
	return nil
}

func (in *StoreBucketsInputs) root() minioRoot {
	return minioRoot{in.URL, in.CACertPem, in.RootUser, in.RootPassword}
}

// setUp makes every region's bucket with its rules and its two users,
// whatever of them there is already.
func (in *StoreBucketsInputs) setUp(ctx context.Context) (map[string]any, error) {
	s3, adm, err := in.root().clients()
	if err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithTimeout(ctx, minioReady)
	err = minioserver.AwaitReady(rctx, s3, snapstore.Bucket(in.Regions[0].Region))
	rcancel()
	if err != nil {
		return nil, err
	}
	buckets := []any{}
	for _, r := range in.Regions {
		v := snapstore.Store{Client: s3, Region: r.Region, KeepDays: in.KeepDays, OpTimeout: minioCall}
		if err := v.Ensure(ctx); err != nil {
			return nil, err
		}
		for _, c := range r.Clusters {
			if err := setMinIOUser(ctx, adm, "snapshot store storer", c.Storer, c.StorerPassword, storerPolicy(r.Region, c.Cluster)); err != nil {
				return nil, err
			}
		}
		if err := setMinIOUser(ctx, adm, "snapshot store restorer", r.Restorer, r.RestorerPassword, RestorerPolicy(r.Region)); err != nil {
			return nil, err
		}
		buckets = append(buckets, snapstore.Bucket(r.Region))
	}
	return map[string]any{"buckets": buckets}, nil
}

// removeUsers removes users and their policies; gone already is not an
// error.
func (in *StoreBucketsInputs) removeUsers(ctx context.Context, users []string) error {
	_, adm, err := in.root().clients()
	if err != nil {
		return err
	}
	for _, u := range users {
		if err := removeMinIOUser(ctx, adm, "snapshot store user", u); err != nil {
			return err
		}
	}
	return nil
}

// users are every region's restorer and clusters' storers (and an older
// state's region-wide storer, so that an update removes it).
func (in *StoreBucketsInputs) users() []string {
	var out []string
	for _, r := range in.Regions {
		out = append(out, r.Restorer)
		if r.Storer != "" {
			out = append(out, r.Storer)
		}
		for _, c := range r.Clusters {
			out = append(out, c.Storer)
		}
	}
	return out
}

// present reports whether every bucket and user is as setUp left it.
func (in *StoreBucketsInputs) present(ctx context.Context) (bool, error) {
	s3, adm, err := in.root().clients()
	if err != nil {
		return false, err
	}
	for _, r := range in.Regions {
		users := []string{r.Restorer}
		for _, c := range r.Clusters {
			users = append(users, c.Storer)
		}
		for _, u := range users {
			if ok, err := minioUserHasItsPolicy(ctx, adm, u); !ok || err != nil {
				return false, err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, minioCall)
		st, err := s3.GetBucketVersioning(cctx, snapstore.Bucket(r.Region))
		cancel()
		if minio.ToErrorResponse(err).Code == "NoSuchBucket" {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !st.Enabled() {
			return false, nil
		}
	}
	return true, nil
}

func init() {
	register("VaultBuckets", spec[StoreBucketsInputs]{
		Validate: func(in *StoreBucketsInputs) error { return in.validate() },
		Create: func(ctx context.Context, _ *Env, in *StoreBucketsInputs) (string, map[string]any, error) {
			out, err := in.setUp(ctx)
			if err != nil {
				return "", nil, err
			}
			return in.URL + "#snapshot store", out, nil
		},
		// Every change is set again on the same server; the users of a
		// region no longer kept (or renamed) are removed. Its bucket stays:
		// snapshots outlive the configuration that made them.
		Update: func(ctx context.Context, _ *Env, _ string, olds, news *StoreBucketsInputs, _ map[string]any) (map[string]any, error) {
			out, err := news.setUp(ctx)
			if err != nil {
				return nil, err
			}
			var gone []string
			for _, u := range olds.users() {
				if !slices.Contains(news.users(), u) {
					gone = append(gone, u)
				}
			}
			return out, news.removeUsers(ctx, gone)
		},
		Replaces: []string{"url"},
		Read: func(ctx context.Context, _ *Env, _ string, in *StoreBucketsInputs, st map[string]any) (map[string]any, error) {
			ok, err := in.present(ctx)
			if err != nil {
				return st, nil // MinIO not answering is no proof of drift
			}
			if !ok {
				return nil, nil
			}
			return st, nil
		},
		// The buckets stay: snapshots outlive the stack. The users go.
		Delete: func(ctx context.Context, _ *Env, _ string, in *StoreBucketsInputs, _ map[string]any) error {
			return in.removeUsers(ctx, in.users())
		},
		Secrets: []string{"rootPassword", "regions"},
	})
}
