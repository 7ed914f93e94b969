package provider_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopMinIO()
	os.Exit(code)
}

var archiveSeq atomic.Int64

// day is the day the archiver exports in these tests.
var day = time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)

// events is an archive.Source of a fixed history.
type events []audit.Event

func (es events) Between(_ context.Context, from, to time.Time, after audit.Cursor, limit int, kinds ...audit.Kind) ([]audit.Event, error) {
	var out []audit.Event
	if after != (audit.Cursor{}) {
		return nil, nil // one page holds them all
	}
	for _, e := range es {
		if !e.At.Before(from) && (to.IsZero() || e.At.Before(to)) && (len(kinds) == 0 || slices.Contains(kinds, e.Kind)) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (es events) now() time.Time { return day.Add(30 * time.Hour) }

type clock struct{ t time.Time }

func (c clock) Now() time.Time                         { return c.t }
func (c clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// archiveInputs are an ArchiveBuckets resource of fresh buckets on the
// test MinIO (plain http on loopback), records in governance mode so that
// a bypass is something root could do.
func archiveInputs(mio *resourcetest.MinIO) map[string]any {
	n := fmt.Sprintf("%d-%d", time.Now().UnixNano(), archiveSeq.Add(1))
	return map[string]any{"url": "http://" + mio.Endpoint, "rootUser": resourcetest.MinIOUser, "rootPassword": resourcetest.MinIOPassword,
		"historyBucket": "history-" + n, "recordsBucket": "records-" + n, "historyDays": 365, "recordsMode": "GOVERNANCE", "recordsYears": 7,
		"user": "archiver-" + n, "password": "archiver-secret-" + n}
}

// archiver is an archive of the history through the archiver user.
func archiver(t *testing.T, mio *resourcetest.MinIO, in map[string]any) (*archive.Archive, *minio.Client) {
	t.Helper()
	cli, err := minio.New(mio.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(in["user"].(string), in["password"].(string), "")})
	if err != nil {
		t.Fatal(err)
	}
	es := events(audittest.EveryKind(day.Add(time.Hour)))
	a, err := archive.New(archive.Config{Store: es, Client: cli, HistoryBucket: in["historyBucket"].(string), RecordsBucket: in["recordsBucket"].(string),
		RecordsMode: minio.Governance, Clock: clock{es.now()}})
	if err != nil {
		t.Fatal(err)
	}
	return a, cli
}

// archiveRun is the archiver's daily run: check the buckets, export a
// day, copy its records.
func archiveRun(ctx context.Context, a *archive.Archive) error {
	if err := a.Prepare(ctx); err != nil {
		return fmt.Errorf("prepare (check): %w", err)
	}
	if _, err := a.ExportDay(ctx, day); err != nil {
		return err
	}
	c, err := a.CopyRecords(ctx, day)
	if err == nil && c.Copied+c.Present == 0 {
		err = fmt.Errorf("no record copied or present: %+v", c)
	}
	return err
}

// unrefused tries what the archiver must never do to what it wrote, and
// returns each attempt MinIO did not refuse (AccessDenied, or
// InvalidRequest "WORM protected" for a retention object lock itself
// keeps); the codes
// of the refusals are logged.
func unrefused(ctx context.Context, t *testing.T, cli *minio.Client, in map[string]any) []string {
	t.Helper()
	history, records := in["historyBucket"].(string), in["recordsBucket"].(string)
	var record minio.ObjectInfo
	for o := range cli.ListObjects(ctx, records, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		record = o
	}
	if record.Key == "" {
		t.Fatal("no record in the records bucket")
	}
	days, years, unit, mode := uint(1), uint(1), minio.Days, minio.Governance
	attempts := []struct {
		what string
		do   func() error
	}{
		{"DeleteObject (history)", func() error {
			return cli.RemoveObject(ctx, history, archive.HistoryKey(day), minio.RemoveObjectOptions{})
		}},
		{"DeleteObject (record, a delete marker)", func() error {
			return cli.RemoveObject(ctx, records, record.Key, minio.RemoveObjectOptions{})
		}},
		{"DeleteObjectVersion (record)", func() error {
			return cli.RemoveObject(ctx, records, record.Key, minio.RemoveObjectOptions{VersionID: record.VersionID})
		}},
		{"DeleteObjectVersion with governance bypass (record)", func() error {
			return cli.RemoveObject(ctx, records, record.Key, minio.RemoveObjectOptions{VersionID: record.VersionID, GovernanceBypass: true})
		}},
		{"PutObjectRetention shortening with governance bypass (record)", func() error {
			until := time.Now().Add(time.Hour)
			return cli.PutObjectRetention(ctx, records, record.Key, minio.PutObjectRetentionOptions{VersionID: record.VersionID,
				Mode: &mode, RetainUntilDate: &until, GovernanceBypass: true})
		}},
		{"PutObjectRetention shortening (record)", func() error {
			until := time.Now().Add(time.Hour)
			return cli.PutObjectRetention(ctx, records, record.Key, minio.PutObjectRetentionOptions{VersionID: record.VersionID,
				Mode: &mode, RetainUntilDate: &until})
		}},
		{"PutBucketLifecycle (history)", func() error {
			return cli.SetBucketLifecycle(ctx, history, &lifecycle.Configuration{Rules: []lifecycle.Rule{{ID: archive.HistoryRuleID, Status: "Enabled",
				RuleFilter: lifecycle.Filter{Prefix: "history/"}, Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(days)}}}})
		}},
		{"DeleteBucketLifecycle (history)", func() error {
			return cli.SetBucketLifecycle(ctx, history, lifecycle.NewConfiguration())
		}},
		{"PutBucketObjectLockConfiguration (records)", func() error {
			return cli.SetObjectLockConfig(ctx, records, &mode, &years, &unit)
		}},
		{"PutBucketVersioning suspend (records)", func() error { return cli.SuspendVersioning(ctx, records) }},
		{"DeleteBucket (history)", func() error { return cli.RemoveBucket(ctx, history) }},
		{"CreateBucket", func() error { return cli.MakeBucket(ctx, history+"-x", minio.MakeBucketOptions{}) }},
	}
	var out []string
	for _, a := range attempts {
		err := a.do()
		code := minio.ToErrorResponse(err).Code
		locked := code == "InvalidRequest" && strings.Contains(err.Error(), "WORM protected")
		if code != "AccessDenied" && !locked {
			out = append(out, fmt.Sprintf("%s: %v", a.what, err))
			continue
		}
		t.Logf("refused: %s: %s (%s)", a.what, code, minio.ToErrorResponse(err).Message)
	}
	return out
}

// The ArchiveBuckets resource makes both buckets with their rules and the
// archiver user with its policy, again idempotently. The archiver can do
// a day's run (a read-only check of the buckets, an export, a record
// copy) and nothing that removes or shortens what it wrote: MinIO refuses
// deletes of an object or a version, a governance bypass, and changes of
// the buckets' rules. A broken variant (a policy of s3:*) fails the same
// check.
func TestArchiveBucketsMakesAnArchiverThatCannotErase(t *testing.T) {
	mio := resourcetest.StartMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := provider.New()
	in := archiveInputs(mio)
	u := urn("ArchiveBuckets", "archive")

	a, cli := archiver(t, mio, in)
	root := mio.Client(t)
	rootBuckets := archive.Buckets{Client: root, HistoryBucket: in["historyBucket"].(string), RecordsBucket: in["recordsBucket"].(string),
		RecordsMode: minio.Governance}
	// Before the resource: no buckets, and the check says so.
	if err := rootBuckets.Check(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("check before the resource: %v; want the buckets missing", err)
	}
	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: u, Properties: props(t, in)})
	if err != nil {
		t.Fatal(err)
	}
	out := outputs(t, created.Properties)
	if out["policy"] != string(provider.ArchiverPolicy(in["historyBucket"].(string), in["recordsBucket"].(string), 7)) {
		t.Fatalf("policy output %v", out["policy"])
	}
	t.Logf("archiver policy: %s", out["policy"])
	// Made again with nothing changed: the same.
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: u, Id: created.Id, Olds: created.Properties, News: props(t, in)}); err != nil {
		t.Fatalf("set up again: %v", err)
	}
	if err := rootBuckets.Check(ctx); err != nil {
		t.Fatalf("buckets after the resource: %v", err)
	}
	adm, err := madmin.NewWithOptions(mio.Endpoint, &madmin.Options{Creds: credentials.NewStaticV4(resourcetest.MinIOUser, resourcetest.MinIOPassword, "")})
	if err != nil {
		t.Fatal(err)
	}
	info, err := adm.GetUserInfo(ctx, in["user"].(string))
	if err != nil || info.Status != madmin.AccountEnabled || info.PolicyName != in["user"] {
		t.Fatalf("archiver user: %+v, %v; want enabled with only its policy", info, err)
	}

	if err := archiveRun(ctx, a); err != nil {
		t.Fatalf("the archiver's daily run: %v", err)
	}
	if bad := unrefused(ctx, t, cli, in); len(bad) > 0 {
		t.Fatalf("the archiver was not refused:\n%s", strings.Join(bad, "\n"))
	}
	// It cannot even make the buckets it is given: ManageBuckets would fail.
	if err := a.EnsureBuckets(ctx); minio.ToErrorResponse(err).Code != "AccessDenied" && !strings.Contains(fmt.Sprint(err), "Access Denied") {
		t.Errorf("the archiver setting the buckets' rules: %v; want refused", err)
	}

	// Refresh finds it; with the user removed it is drift, set up again.
	r, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: u, Id: created.Id, Properties: created.Properties, Inputs: props(t, in)})
	if err != nil || r.Id == "" {
		t.Fatalf("read: %v, %v; want found", r, err)
	}
	if err := adm.RemoveUser(ctx, in["user"].(string)); err != nil {
		t.Fatal(err)
	}
	if r, err = p.Read(ctx, &pulumirpc.ReadRequest{Urn: u, Id: created.Id, Properties: created.Properties, Inputs: props(t, in)}); err != nil || r.Id != "" {
		t.Fatalf("read without the user: %v, %v; want gone", r, err)
	}

	// A broken variant: the same resource with a policy of s3:* on the
	// buckets. The run still works, and the check of refusals fails.
	defer provider.SetArchiverPolicy(func(h, rec string, years int) []byte {
		return []byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::` + h + `","arn:aws:s3:::` + h + `/*","arn:aws:s3:::` + rec + `","arn:aws:s3:::` + rec + `/*"]}]}`)
	})()
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: u, Id: created.Id, Olds: created.Properties, News: props(t, in)}); err != nil {
		t.Fatal(err)
	}
	if err := archiveRun(ctx, a); err != nil {
		t.Fatalf("the daily run with s3:*: %v", err)
	}
	bad := unrefused(ctx, t, cli, in)
	if len(bad) == 0 {
		t.Fatal("with a policy of s3:* the archiver was refused everything: the check proves nothing")
	}
	t.Logf("with s3:*, as it should, the check fails; not refused:\n%s", strings.Join(bad, "\n"))

	// Delete removes the archiver and keeps the buckets.
	if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: u, Id: created.Id, Properties: created.Properties}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.GetUserInfo(ctx, in["user"].(string)); madmin.ToErrorResponse(err).Code != "XMinioAdminNoSuchUser" {
		t.Errorf("archiver after delete: %v; want no such user", err)
	}
	if ok, err := root.BucketExists(ctx, in["recordsBucket"].(string)); err != nil || !ok {
		t.Errorf("records bucket after delete: %v, %v; want kept", ok, err)
	}
}

// A record is put with its retention given, so the policy must allow
// s3:PutObjectRetention on the records: without it MinIO refuses the
// copy (the bucket's default retention alone would need no permission).
func TestTheArchiverNeedsPutObjectRetentionForRecords(t *testing.T) {
	mio := resourcetest.StartMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer provider.SetArchiverPolicy(func(h, rec string, years int) []byte {
		return []byte(strings.Replace(string(provider.ArchiverPolicy(h, rec, years)), `"s3:PutObjectRetention"`, `"s3:GetObjectRetention"`, 1))
	})()
	in := archiveInputs(mio)
	if _, err := provider.New().Create(ctx, &pulumirpc.CreateRequest{Urn: urn("ArchiveBuckets", "archive"), Properties: props(t, in)}); err != nil {
		t.Fatal(err)
	}
	a, _ := archiver(t, mio, in)
	if _, err := a.ExportDay(ctx, day); err != nil {
		t.Fatalf("export: %v", err)
	}
	_, err := a.CopyRecords(ctx, day)
	if !strings.Contains(fmt.Sprint(err), "Access Denied") {
		t.Fatalf("copying records without s3:PutObjectRetention: %v; want refused", err)
	}
	t.Logf("without s3:PutObjectRetention: %v", err)
}

// Inputs are checked before anything is made: https needs the CA, plain
// http is for loopback only, the archiver is not root.
func TestArchiveBucketsInputsAreChecked(t *testing.T) {
	base := map[string]any{"url": "https://10.0.0.1:9000", "caCertPem": "x", "rootUser": "lockplane", "rootPassword": "rootpassword",
		"historyBucket": "h", "recordsBucket": "r", "historyDays": 365, "recordsMode": "COMPLIANCE", "recordsYears": 7,
		"user": "lockplane-archiver", "password": "archiverpassword"}
	for _, c := range []struct {
		change map[string]any
		want   string
	}{
		{nil, ""},
		{map[string]any{"caCertPem": ""}, "caCertPem"},
		{map[string]any{"url": "http://10.0.0.1:9000"}, "https"},
		{map[string]any{"url": "http://127.0.0.1:9000", "caCertPem": ""}, ""},
		{map[string]any{"user": "lockplane"}, "root"},
		{map[string]any{"password": "short"}, "password"},
		{map[string]any{"recordsBucket": "h"}, "distinct"},
		{map[string]any{"recordsMode": "NONE"}, "recordsMode"},
	} {
		in := map[string]any{}
		for k, v := range base {
			in[k] = v
		}
		for k, v := range c.change {
			in[k] = v
		}
		resp, err := provider.New().Check(context.Background(), &pulumirpc.CheckRequest{Urn: urn("ArchiveBuckets", "a"), News: props(t, in)})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, f := range resp.Failures {
			got += f.Reason
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: failures %q, want one naming %q", c.change, got, c.want)
		}
	}
}
