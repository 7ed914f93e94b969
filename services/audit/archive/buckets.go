package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// HistoryRuleID is the ID of the history bucket's lifecycle rule.
const HistoryRuleID = "expire-history"

// Buckets are the archive's two buckets and their rules. EnsureBuckets
// makes them with MinIO's root user (at deploy time: the ArchiveBuckets
// resource of the lockplane provider; or `lockplane dev`, which runs its
// own MinIO); CheckBuckets is all an archiver that may not change them
// does.
type Buckets struct {
	Client *minio.Client
	// HistoryBucket and RecordsBucket must differ.
	HistoryBucket, RecordsBucket string
	// HistoryDays (365 when zero), RecordsMode (COMPLIANCE when empty)
	// and RecordsYears (7 when zero) are Config's.
	HistoryDays  int
	RecordsMode  minio.RetentionMode
	RecordsYears uint
}

// withDefaults checks b and fills in its defaults.
func (b Buckets) withDefaults() (Buckets, error) {
	switch {
	case b.Client == nil:
		return b, errors.New("archive: a MinIO client is required")
	case b.HistoryBucket == "" || b.RecordsBucket == "" || b.HistoryBucket == b.RecordsBucket:
		return b, errors.New("archive: two distinct buckets are required")
	case b.RecordsMode != "" && !b.RecordsMode.IsValid():
		return b, errors.New("archive: records mode must be GOVERNANCE or COMPLIANCE")
	}
	if b.HistoryDays <= 0 {
		b.HistoryDays = DefaultHistoryDays
	}
	if b.RecordsMode == "" {
		b.RecordsMode = minio.Compliance
	}
	if b.RecordsYears == 0 {
		b.RecordsYears = DefaultRecordsYears
	}
	return b, nil
}

// buckets are a's.
func (a *Archive) buckets() Buckets {
	return Buckets{Client: a.cfg.Client, HistoryBucket: a.cfg.HistoryBucket, RecordsBucket: a.cfg.RecordsBucket,
		HistoryDays: a.cfg.HistoryDays, RecordsMode: a.cfg.RecordsMode, RecordsYears: a.cfg.RecordsYears}
}

// Prepare is what the elected archiver does before its daily run: with
// ManageBuckets, EnsureBuckets; without (the arbiter's, whose MinIO user
// may not change a bucket), CheckBuckets.
func (a *Archive) Prepare(ctx context.Context) error {
	if a.cfg.ManageBuckets {
		return a.EnsureBuckets(ctx)
	}
	return a.CheckBuckets(ctx)
}

// EnsureBuckets is Buckets.Ensure of a's buckets.
func (a *Archive) EnsureBuckets(ctx context.Context) error { return a.buckets().Ensure(ctx) }

// CheckBuckets is Buckets.Check of a's buckets.
func (a *Archive) CheckBuckets(ctx context.Context) error { return a.buckets().Check(ctx) }

// Ensure creates the buckets that are missing and sets their rules,
// again on every call (so a changed config takes effect): the history
// bucket expires objects HistoryDays after they are written; the records
// bucket has object lock (and so versioning) on, with a default retention
// of RecordsYears in RecordsMode. A records bucket that exists without
// object lock is an error: it cannot be turned into one. It needs a user
// allowed to make buckets and set their rules: MinIO's root.
func (b Buckets) Ensure(ctx context.Context) error {
	b, err := b.withDefaults()
	if err != nil {
		return err
	}
	c := b.Client
	if err := b.makeBucket(ctx, b.HistoryBucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	if err := c.SetBucketLifecycle(ctx, b.HistoryBucket, b.historyRules()); err != nil {
		return fmt.Errorf("archive: lifecycle of %s: %w", b.HistoryBucket, err)
	}

	if err := b.makeBucket(ctx, b.RecordsBucket, minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
		return err
	}
	lock, _, _, _, err := c.GetObjectLockConfig(ctx, b.RecordsBucket)
	if err != nil || lock != "Enabled" {
		return fmt.Errorf("archive: records bucket %s has no object lock (%q, %v): records need a bucket created with it", b.RecordsBucket, lock, err)
	}
	// Object lock turned versioning on when the bucket was made; this
	// makes sure.
	if err := c.EnableVersioning(ctx, b.RecordsBucket); err != nil {
		return fmt.Errorf("archive: versioning of %s: %w", b.RecordsBucket, err)
	}
	mode, years, unit := b.RecordsMode, b.RecordsYears, minio.Years
	if err := c.SetObjectLockConfig(ctx, b.RecordsBucket, &mode, &years, &unit); err != nil {
		return fmt.Errorf("archive: default retention of %s: %w", b.RecordsBucket, err)
	}
	return nil
}

// Check verifies, without writing anything, that both buckets exist with
// the rules Ensure sets: the history bucket's lifecycle rule expiring
// history/ after HistoryDays, and the records bucket's object lock with a
// default retention of RecordsYears in RecordsMode. It needs only
// s3:ListBucket, s3:GetLifecycleConfiguration and
// s3:GetBucketObjectLockConfiguration on them.
func (b Buckets) Check(ctx context.Context) error {
	b, err := b.withDefaults()
	if err != nil {
		return err
	}
	c := b.Client
	for _, bucket := range []string{b.HistoryBucket, b.RecordsBucket} {
		exists, err := c.BucketExists(ctx, bucket)
		if err != nil {
			return fmt.Errorf("archive: bucket %s: %w", bucket, err)
		}
		if !exists {
			return fmt.Errorf("archive: bucket %s does not exist: it is made at deploy time (the ArchiveBuckets resource), with MinIO's root user", bucket)
		}
	}
	rules, err := c.GetBucketLifecycle(ctx, b.HistoryBucket)
	if minio.ToErrorResponse(err).Code == "NoSuchLifecycleConfiguration" {
		rules, err = lifecycle.NewConfiguration(), nil // named below
	}
	if err != nil {
		return fmt.Errorf("archive: lifecycle of %s: %w", b.HistoryBucket, err)
	}
	want := b.historyRules().Rules[0]
	found := false
	for _, r := range rules.Rules {
		if r.ID == HistoryRuleID {
			found = true
			if r.Status != want.Status || r.RuleFilter.Prefix != want.RuleFilter.Prefix || r.Expiration.Days != want.Expiration.Days {
				return fmt.Errorf("archive: lifecycle rule %s of %s: %s, prefix %q, expires after %d days; want %s, %q, %d days",
					HistoryRuleID, b.HistoryBucket, r.Status, r.RuleFilter.Prefix, r.Expiration.Days, want.Status, want.RuleFilter.Prefix, want.Expiration.Days)
			}
		}
	}
	if !found {
		return fmt.Errorf("archive: %s has no lifecycle rule %s", b.HistoryBucket, HistoryRuleID)
	}
	lock, mode, validity, unit, err := c.GetObjectLockConfig(ctx, b.RecordsBucket)
	if err != nil {
		return fmt.Errorf("archive: object lock of %s: %w", b.RecordsBucket, err)
	}
	if lock != "Enabled" || mode == nil || *mode != b.RecordsMode || validity == nil || *validity != b.RecordsYears || unit == nil || *unit != minio.Years {
		return fmt.Errorf("archive: records bucket %s: object lock %q, default retention %v %v %v; want Enabled, %s %d %s",
			b.RecordsBucket, lock, deref(mode), deref(validity), deref(unit), b.RecordsMode, b.RecordsYears, minio.Years)
	}
	return nil
}

// historyRules are the history bucket's lifecycle rules.
func (b Buckets) historyRules() *lifecycle.Configuration {
	return &lifecycle.Configuration{Rules: []lifecycle.Rule{{
		ID:         HistoryRuleID,
		Status:     "Enabled",
		RuleFilter: lifecycle.Filter{Prefix: historyPrefix},
		Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(b.HistoryDays)},
	}}}
}

// makeBucket creates bucket unless it exists.
func (b Buckets) makeBucket(ctx context.Context, bucket string, opts minio.MakeBucketOptions) error {
	exists, err := b.Client.BucketExists(ctx, bucket)
	if err == nil && !exists {
		err = b.Client.MakeBucket(ctx, bucket, opts)
		if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" { // made meanwhile
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("archive: bucket %s: %w", bucket, err)
	}
	return nil
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
