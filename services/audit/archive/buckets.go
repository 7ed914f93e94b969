package archive

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// HistoryRuleID is the ID of the history bucket's lifecycle rule.
const HistoryRuleID = "expire-history"

// EnsureBuckets creates the buckets that are missing and sets their
// rules, again on every call (so a changed config takes effect): the
// history bucket expires objects HistoryDays after they are written; the
// records bucket has object lock (and so versioning) on, with a default
// retention of RecordsYears in RecordsMode. A records bucket that exists
// without object lock is an error: it cannot be turned into one.
func (a *Archive) EnsureBuckets(ctx context.Context) error {
	c := a.cfg.Client
	if err := a.makeBucket(ctx, a.cfg.HistoryBucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	rules := &lifecycle.Configuration{Rules: []lifecycle.Rule{{
		ID:         HistoryRuleID,
		Status:     "Enabled",
		RuleFilter: lifecycle.Filter{Prefix: historyPrefix},
		Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(a.cfg.HistoryDays)},
	}}}
	if err := c.SetBucketLifecycle(ctx, a.cfg.HistoryBucket, rules); err != nil {
		return fmt.Errorf("archive: lifecycle of %s: %w", a.cfg.HistoryBucket, err)
	}

	if err := a.makeBucket(ctx, a.cfg.RecordsBucket, minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
		return err
	}
	lock, _, _, _, err := c.GetObjectLockConfig(ctx, a.cfg.RecordsBucket)
	if err != nil || lock != "Enabled" {
		return fmt.Errorf("archive: records bucket %s has no object lock (%q, %v): records need a bucket created with it", a.cfg.RecordsBucket, lock, err)
	}
	// Object lock turned versioning on when the bucket was made; this
	// makes sure.
	if err := c.EnableVersioning(ctx, a.cfg.RecordsBucket); err != nil {
		return fmt.Errorf("archive: versioning of %s: %w", a.cfg.RecordsBucket, err)
	}
	mode, years, unit := a.cfg.RecordsMode, a.cfg.RecordsYears, minio.Years
	if err := c.SetObjectLockConfig(ctx, a.cfg.RecordsBucket, &mode, &years, &unit); err != nil {
		return fmt.Errorf("archive: default retention of %s: %w", a.cfg.RecordsBucket, err)
	}
	return nil
}

// makeBucket creates bucket unless it exists.
func (a *Archive) makeBucket(ctx context.Context, bucket string, opts minio.MakeBucketOptions) error {
	exists, err := a.cfg.Client.BucketExists(ctx, bucket)
	if err == nil && !exists {
		err = a.cfg.Client.MakeBucket(ctx, bucket, opts)
		if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" { // made meanwhile
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("archive: bucket %s: %w", bucket, err)
	}
	return nil
}
