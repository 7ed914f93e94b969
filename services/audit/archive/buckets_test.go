package archive_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// noEvents is a Source with nothing: Prepare reads no history.
type noEvents struct{}

func (noEvents) Between(context.Context, time.Time, time.Time, audit.Cursor, int, ...audit.Kind) ([]audit.Event, error) {
	return nil, nil
}

// CheckBuckets writes nothing and says what is missing or different:
// no buckets, then after EnsureBuckets none, then a changed lifecycle
// rule, a different retention mode or years. Prepare checks without
// ManageBuckets and makes them with it.
func TestCheckBucketsIsReadOnlyAndPrecise(t *testing.T) {
	cli := resourcetest.StartMinIO(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := fmt.Sprintf("%d-%d", time.Now().UnixNano(), bucketSeq.Add(1))
	cfg := archive.Config{Store: noEvents{}, Client: cli, HistoryBucket: "chk-history-" + n, RecordsBucket: "chk-records-" + n,
		RecordsMode: minio.Governance, RecordsYears: 2, HistoryDays: 30}
	checking, err := archive.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := checking.Prepare(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("prepare (check) without buckets: %v; want them missing", err)
	}
	if ok, err := cli.BucketExists(ctx, cfg.HistoryBucket); err != nil || ok {
		t.Fatalf("the check made the history bucket: %v, %v", ok, err)
	}
	mcfg := cfg
	mcfg.ManageBuckets = true
	managing, err := archive.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := managing.Prepare(ctx); err != nil {
		t.Fatalf("prepare (ensure): %v", err)
	}
	if err := checking.Prepare(ctx); err != nil {
		t.Fatalf("check after ensure: %v", err)
	}

	b := archive.Buckets{Client: cli, HistoryBucket: cfg.HistoryBucket, RecordsBucket: cfg.RecordsBucket, RecordsMode: minio.Governance,
		RecordsYears: 2, HistoryDays: 30}
	for _, c := range []struct {
		what string
		b    func(archive.Buckets) archive.Buckets
		want string
	}{
		{"other history days", func(b archive.Buckets) archive.Buckets { b.HistoryDays = 31; return b }, "expires after 30 days"},
		{"other records years", func(b archive.Buckets) archive.Buckets { b.RecordsYears = 3; return b }, "want Enabled, GOVERNANCE 3"},
		{"other records mode", func(b archive.Buckets) archive.Buckets { b.RecordsMode = minio.Compliance; return b }, "want Enabled, COMPLIANCE"},
	} {
		if err := c.b(b).Check(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it named (%q)", c.what, err, c.want)
		}
	}
	// A rule removed by someone else (root): named.
	if err := cli.SetBucketLifecycle(ctx, cfg.HistoryBucket, lifecycle.NewConfiguration()); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(ctx); err == nil || !strings.Contains(err.Error(), "no lifecycle") {
		t.Errorf("check without the rule: %v; want it missing", err)
	}
}
