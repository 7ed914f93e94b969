package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/archive/minioserver"
	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
)

// ArchiveBucketsInputs set up the audit archive's MinIO at deploy time,
// as its root user: the history and records buckets with their rules
// (archive.Buckets.Ensure, the one way they are made), and the archiver,
// the MinIO user the arbiters are given, with a policy that lets it add
// history and records and read them back but never delete one, shorten a
// retention, bypass governance or change a bucket's rules. Root's
// password stays on the archive host and in the stack's state.
type ArchiveBucketsInputs struct {
	// URL is MinIO's S3 base URL: https, its server certificate signed by
	// CACertPem. Plain http is accepted only on a loopback host (tests).
	URL       string `json:"url"`
	CACertPem string `json:"caCertPem,omitempty"`
	// RootUser and RootPassword are MinIO's root credentials.
	RootUser     string `json:"rootUser"`
	RootPassword string `json:"rootPassword"`
	// The buckets and their rules: archive.Buckets.
	HistoryBucket string `json:"historyBucket"`
	RecordsBucket string `json:"recordsBucket"`
	HistoryDays   int    `json:"historyDays"`
	RecordsMode   string `json:"recordsMode"`
	RecordsYears  int    `json:"recordsYears"`
	// User and Password are the archiver's; its policy is named User.
	User     string `json:"user"`
	Password string `json:"password"`
}

// Deadlines of the ArchiveBuckets calls: minioReady is how long a MinIO
// just (re)started has to answer; minioCall bounds every other call.
const (
	minioReady = 2 * time.Minute
	minioCall  = 30 * time.Second
)

func (in *ArchiveBucketsInputs) validate() error {
	if err := (minioRoot{in.URL, in.CACertPem, in.RootUser, in.RootPassword}).validate(); err != nil {
		return err
	}
	switch {
	case len(in.User) < 3 || len(in.Password) < 8:
		return errors.New("user, password: a user of at least 3 characters and a password of at least 8 are required (MinIO's rule)")
	case in.User == in.RootUser:
		return errors.New("user: must not be the root user")
	case in.HistoryDays < 1 || in.RecordsYears < 1:
		return errors.New("historyDays, recordsYears: must be at least 1")
	case !minio.RetentionMode(in.RecordsMode).IsValid():
		return fmt.Errorf("recordsMode: %q, want COMPLIANCE or GOVERNANCE", in.RecordsMode)
	case in.HistoryBucket == "" || in.RecordsBucket == "" || in.HistoryBucket == in.RecordsBucket:
		return errors.New("historyBucket, recordsBucket: two distinct buckets are required")
	}
	return nil
}

// buckets are the archive's buckets through c.
func (in *ArchiveBucketsInputs) buckets(c *minio.Client) archive.Buckets {
	return archive.Buckets{Client: c, HistoryBucket: in.HistoryBucket, RecordsBucket: in.RecordsBucket,
		HistoryDays: in.HistoryDays, RecordsMode: minio.RetentionMode(in.RecordsMode), RecordsYears: uint(in.RecordsYears)}
}

// clients are an S3 and an admin client of MinIO's root user.
func (in *ArchiveBucketsInputs) clients() (*minio.Client, *madmin.AdminClient, error) {
	return minioRoot{in.URL, in.CACertPem, in.RootUser, in.RootPassword}.clients()
}

// ArchiverPolicy is the archiver's MinIO policy over the two buckets:
// what the daily run does (put an object, stat it, read the buckets'
// rules to check them) and nothing that could remove or shorten what is
// kept. s3:PutObjectRetention is there because a record is put with its
// retention given (archive.CopyRecords); MinIO's own rules keep a
// compliance retention from being shortened, but would let a user with
// s3:PutObjectRetention shorten a governance one (with the bypass header,
// even without s3:BypassGovernanceRetention), so a retention of less
// than recordsYears*365 days from now is denied. The Deny statements keep
// the destructive actions refused even if another policy were attached.
func ArchiverPolicy(historyBucket, recordsBucket string, recordsYears int) []byte {
	arn := func(b, suffix string) string { return "arn:aws:s3:::" + b + suffix }
	buckets := []string{arn(historyBucket, ""), arn(recordsBucket, "")}
	objects := []string{arn(historyBucket, "/*"), arn(recordsBucket, "/*")}
	records := []string{arn(recordsBucket, "/*")}
	type statement struct {
		Sid       string                    `json:"Sid"`
		Effect    string                    `json:"Effect"`
		Action    []string                  `json:"Action"`
		Resource  []string                  `json:"Resource"`
		Condition map[string]map[string]int `json:"Condition,omitempty"`
	}
	doc := struct {
		Version   string      `json:"Version"`
		Statement []statement `json:"Statement"`
	}{"2012-10-17", []statement{
		{Sid: "CheckBuckets", Effect: "Allow", Action: []string{"s3:ListBucket", "s3:GetBucketLocation", "s3:GetLifecycleConfiguration",
			"s3:GetBucketObjectLockConfiguration"}, Resource: buckets},
		{Sid: "AddObjects", Effect: "Allow", Action: []string{"s3:PutObject", "s3:GetObject", "s3:GetObjectRetention"}, Resource: objects},
		{Sid: "RetainRecords", Effect: "Allow", Action: []string{"s3:PutObjectRetention"}, Resource: records},
		{Sid: "NeverShortenRetention", Effect: "Deny", Action: []string{"s3:PutObjectRetention"}, Resource: records,
			Condition: map[string]map[string]int{"NumericLessThan": {"s3:object-lock-remaining-retention-days": recordsYears * 365}}},
		{Sid: "NeverRemove", Effect: "Deny", Action: []string{"s3:DeleteObject", "s3:DeleteObjectVersion", "s3:BypassGovernanceRetention",
			"s3:PutLifecycleConfiguration", "s3:PutBucketObjectLockConfiguration", "s3:PutBucketVersioning",
			"s3:DeleteBucket", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy", "s3:PutObjectLegalHold",
			"s3:PutReplicationConfiguration", "s3:PutBucketNotification"}, Resource: append(buckets, objects...)},
	}}
	b, _ := json.Marshal(doc)
	return b
}

// archiverPolicy is the policy the archiver is given; tests replace it.
var archiverPolicy = ArchiverPolicy

// setUp makes the buckets with their rules and the archiver with its
// policy, whatever of them there is already.
func (in *ArchiveBucketsInputs) setUp(ctx context.Context) (map[string]any, error) {
	s3, adm, err := in.clients()
	if err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithTimeout(ctx, minioReady)
	err = minioserver.AwaitReady(rctx, s3, in.HistoryBucket)
	rcancel()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*minioCall)
	defer cancel()
	if err := in.buckets(s3).Ensure(cctx); err != nil {
		return nil, err
	}
	policy := archiverPolicy(in.HistoryBucket, in.RecordsBucket, in.RecordsYears)
	if err := in.setUser(ctx, adm, policy); err != nil {
		return nil, err
	}
	return map[string]any{"policy": string(policy)}, nil
}

// setUser creates or updates the archiver (its password, enabled) and
// gives it its policy, and only that one.
func (in *ArchiveBucketsInputs) setUser(ctx context.Context, adm *madmin.AdminClient, policy []byte) error {
	return setMinIOUser(ctx, adm, "archiver", in.User, in.Password, policy)
}

// removeUser removes the archiver and its policy; a user or server gone
// already is not an error (a MinIO whose host is gone has no users).
func (in *ArchiveBucketsInputs) removeUser(ctx context.Context, user string) error {
	_, adm, err := in.clients()
	if err != nil {
		return err
	}
	return removeMinIOUser(ctx, adm, "archiver", user)
}

// present reports whether the buckets and the archiver are as setUp
// left them: false is drift, which the next up sets up again (setUp is
// idempotent); an error is MinIO not answering about the user.
func (in *ArchiveBucketsInputs) present(ctx context.Context) (bool, error) {
	s3, adm, err := in.clients()
	if err != nil {
		return false, err
	}
	if ok, err := minioUserHasItsPolicy(ctx, adm, in.User); !ok || err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, minioCall)
	defer cancel()
	return in.buckets(s3).Check(ctx) == nil, nil
}

func init() {
	register("ArchiveBuckets", spec[ArchiveBucketsInputs]{
		Validate: func(in *ArchiveBucketsInputs) error { return in.validate() },
		Create: func(ctx context.Context, _ *Env, in *ArchiveBucketsInputs) (string, map[string]any, error) {
			out, err := in.setUp(ctx)
			if err != nil {
				return "", nil, err
			}
			return in.URL + "#" + in.User, out, nil
		},
		// Every change (a password, a rule, a bucket's retention) is set
		// again on the same server; a renamed archiver replaces the old
		// one, which is removed.
		Update: func(ctx context.Context, _ *Env, _ string, olds, news *ArchiveBucketsInputs, _ map[string]any) (map[string]any, error) {
			out, err := news.setUp(ctx)
			if err != nil {
				return nil, err
			}
			if olds.User != "" && olds.User != news.User {
				if err := news.removeUser(ctx, olds.User); err != nil {
					return nil, err
				}
			}
			return out, nil
		},
		Replaces: []string{"url"},
		Read: func(ctx context.Context, _ *Env, _ string, in *ArchiveBucketsInputs, st map[string]any) (map[string]any, error) {
			ok, err := in.present(ctx)
			if err != nil {
				return st, nil // MinIO not answering is no proof of drift
			}
			if !ok {
				return nil, nil
			}
			return st, nil
		},
		// The buckets stay: history and records outlive a stack. The
		// archiver goes.
		Delete: func(ctx context.Context, _ *Env, _ string, in *ArchiveBucketsInputs, _ map[string]any) error {
			return in.removeUser(ctx, in.User)
		},
		Secrets: []string{"rootPassword", "password"},
	})
}
