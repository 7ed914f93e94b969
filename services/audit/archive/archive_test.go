package archive_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	"github.com/parquet-go/parquet-go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopClickHouse()
	resourcetest.StopMinIO()
	os.Exit(code)
}

// day is the exported day; now is when the tests run, after it.
var (
	day = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	now = day.Add(50 * time.Hour)
)

// fixedClock stands still.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                     { return c.t }
func (fixedClock) After(time.Duration) <-chan time.Time { return nil }

// env is a migrated store on a fresh database and a MinIO client.
type env struct {
	ctx    context.Context
	store  *chstore.Store
	client *minio.Client
}

var bucketSeq atomic.Int64

func newEnv(t *testing.T) env {
	t.Helper()
	ch := resourcetest.StartClickHouse(t)
	mio := resourcetest.StartMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s := chstore.New(ch.URL(), ch.Database(t), chstore.WithCredentials(ch.Writer()))
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return env{ctx: ctx, store: s, client: mio.Client(t)}
}

// config is an archive of fresh buckets (not made yet), records in mode.
func (e env) config(mode minio.RetentionMode) archive.Config {
	n := fmt.Sprintf("%d-%d", time.Now().UnixNano(), bucketSeq.Add(1))
	return archive.Config{Store: e.store, Client: e.client, HistoryBucket: "history-" + n, RecordsBucket: "records-" + n,
		RecordsMode: mode, Clock: fixedClock{now}}
}

func (e env) archive(t *testing.T, cfg archive.Config) *archive.Archive {
	t.Helper()
	a, err := archive.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureBuckets(e.ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// dayEvents is every kind of event within day, from its first to its
// last millisecond, in the export order (time, cluster ID, revision,
// key), then one event on each neighbouring day.
func dayEvents() (in []audit.Event, neighbours []audit.Event) {
	in = append(audittest.EveryKind(day),
		audit.Event{ClusterID: "beef", Cluster: "shard-a", Revision: 499, Key: "team-a/orders/8", Kind: audit.Grant, // same time as
			At: day.Add(1500 * time.Millisecond), Namespace: "team-a", Class: "entity", Identity: "erin", Session: 7}, // c0ffee's expiry
		audit.Event{ClusterID: "beef", Cluster: "shard-a", Revision: 502, Key: "team-a/orders/9", Kind: audit.Grant,
			At: day.Add(24*time.Hour - time.Millisecond), Namespace: "team-a", Class: "entity", Identity: "erin", Session: 8})
	sortExport(in)
	neighbours = []audit.Event{
		{ClusterID: "c0ffee", Cluster: "coord", Revision: 8, Kind: audit.EpochAdvance, At: day.Add(-time.Millisecond), Epoch: 3, Detail: "epoch 3"},
		{ClusterID: "c0ffee", Cluster: "coord", Revision: 21, Key: "payments/ledger/42", Kind: audit.ForceRelease, At: day.AddDate(0, 0, 1),
			Namespace: "payments", Class: "ledger", Identity: "erin", Instance: "erin-pod-1", Session: 707, Epoch: 4},
	}
	return in, neighbours
}

// sortExport sorts events in the export order.
func sortExport(evs []audit.Event) {
	slices.SortFunc(evs, func(x, y audit.Event) int {
		if c := x.At.Compare(y.At); c != 0 {
			return c
		}
		if c := strings.Compare(x.ClusterID, y.ClusterID); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Revision, y.Revision); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
}

// get downloads an object and its metadata.
func get(t *testing.T, e env, bucket, key string, opts minio.GetObjectOptions) ([]byte, minio.ObjectInfo) {
	t.Helper()
	obj, err := e.client.GetObject(e.ctx, bucket, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	info, err := obj.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return data, info
}

// history reads a day's Parquet file back as events, and checks its
// checksum.
func history(t *testing.T, e env, obj archive.Object) []audit.Event {
	t.Helper()
	data, info := get(t, e, obj.Bucket, obj.Key, minio.GetObjectOptions{})
	sum := sha256.Sum256(data)
	if s := hex.EncodeToString(sum[:]); s != obj.SHA256 || info.UserMetadata[archive.ChecksumKey] != s || int64(len(data)) != obj.Size {
		t.Errorf("%s: sha256 %s, %d bytes; Object says %s, %d bytes; metadata %s",
			obj.Key, s, len(data), obj.SHA256, obj.Size, info.UserMetadata[archive.ChecksumKey])
	}
	rows, err := parquet.Read[archive.Row](bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]audit.Event, len(rows))
	for i, r := range rows {
		out[i] = r.Event()
	}
	if len(out) != obj.Events {
		t.Errorf("%s: %d rows, Object says %d", obj.Key, len(out), obj.Events)
	}
	return out
}

// A day of every kind of event is exported whole, every field of every
// event as written, and nothing of the days around it; a second export
// writes the same bytes.
func TestExportDay(t *testing.T) {
	e := newEnv(t)
	in, neighbours := dayEvents()
	if err := e.store.Insert(e.ctx, append(slices.Clone(neighbours), in...)); err != nil {
		t.Fatal(err)
	}
	kinds := map[audit.Kind]bool{}
	for _, ev := range in {
		kinds[ev.Kind] = true
	}
	if len(kinds) != 10 {
		t.Fatalf("the day has %d kinds, want all 10", len(kinds))
	}
	a := e.archive(t, e.config(minio.Governance))

	obj, err := a.ExportDay(e.ctx, day.Add(13*time.Hour)) // any time of the day
	if err != nil {
		t.Fatal(err)
	}
	if want := "history/2026/11/30/events.parquet"; obj.Key != want {
		t.Errorf("key %s, want %s", obj.Key, want)
	}
	audittest.Same(t, "the day", history(t, e, obj), in)

	again, err := a.ExportDay(e.ctx, day)
	if err != nil {
		t.Fatal(err)
	}
	if again != obj {
		t.Errorf("exported again: %+v, want %+v", again, obj)
	}

	// Every stored field of audit.Event (the exported ones: the others
	// are the tailer's own, for its metrics) is a column; the time is UTC
	// millis.
	data, _ := get(t, e, obj.Bucket, obj.Key, minio.GetObjectOptions{})
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	ev := reflect.TypeFor[audit.Event]()
	var stored []reflect.StructField
	for i := range ev.NumField() {
		if ev.Field(i).IsExported() {
			stored = append(stored, ev.Field(i))
		}
	}
	if n := len(f.Schema().Fields()); n != len(stored) {
		t.Errorf("%d columns, audit.Event has %d stored fields", n, len(stored))
	}
	for _, field := range stored {
		name := strings.Split(field.Tag.Get("json"), ",")[0]
		if _, ok := f.Schema().Lookup(name); !ok {
			t.Errorf("no column %q for audit.Event.%s", name, field.Name)
		}
	}
	if leaf, _ := f.Schema().Lookup("at"); !strings.Contains(fmt.Sprint(leaf.Node.Type().LogicalType()), "isAdjustedToUTC=true,unit=MILLIS") {
		t.Errorf("column at is %v, want a UTC timestamp in milliseconds", leaf.Node.Type().LogicalType())
	}

	// The neighbours are exported on their own days; an empty day is a
	// file of no rows.
	for d, want := range map[time.Time][]audit.Event{day.AddDate(0, 0, -1): neighbours[:1], day.AddDate(0, 0, 1): neighbours[1:], day.AddDate(0, 0, -2): nil} {
		obj, err := a.ExportDay(e.ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if got := history(t, e, obj); len(got) > 0 || len(want) > 0 {
			audittest.Same(t, d.Format(time.DateOnly), got, want)
		}
	}
	// A day that has not ended is not exported.
	if _, err := a.ExportDay(e.ctx, now); err == nil {
		t.Error("exported a day that has not ended")
	}
}

// A day of many pages is read whole, page by page, and written as the
// same bytes whatever the page size.
func TestExportDayOfManyPages(t *testing.T) {
	e := newEnv(t)
	var evs []audit.Event
	for i := range 250 {
		// Four events a millisecond, in two clusters, so pages end
		// between events of the same time.
		cluster := []string{"a1", "b2"}[i%2]
		evs = append(evs, audit.Event{ClusterID: cluster, Cluster: "c-" + cluster, Revision: int64(1000 + i/2),
			Key: fmt.Sprintf("ns/class/%d", i%3), Kind: audit.Grant, At: day.Add(time.Duration(i/4) * time.Millisecond),
			Namespace: "ns", Class: "class", Identity: fmt.Sprint("id-", i), Session: int64(i)})
	}
	sortExport(evs)
	_, neighbours := dayEvents()
	if err := e.store.Insert(e.ctx, append(slices.Clone(neighbours), evs...)); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(minio.Governance)
	cfg.PageSize, cfg.RowGroupRows = 7, 100
	small := e.archive(t, cfg)
	obj, err := small.ExportDay(e.ctx, day)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "pages of 7", history(t, e, obj), evs)

	cfg.PageSize = 0 // one page
	whole, err := e.archive(t, cfg).ExportDay(e.ctx, day)
	if err != nil {
		t.Fatal(err)
	}
	if whole != obj {
		t.Errorf("in one page: %+v; in pages of 7: %+v", whole, obj)
	}
}

// The history bucket expires objects after a year; the records bucket
// has object lock, versioning and seven years' default retention. Both
// survive being ensured again; a records bucket without object lock is
// refused.
func TestEnsureBuckets(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("") // the production default: compliance
	a := e.archive(t, cfg)
	if err := a.EnsureBuckets(e.ctx); err != nil {
		t.Fatalf("ensured again: %v", err)
	}

	rules, err := e.client.GetBucketLifecycle(e.ctx, cfg.HistoryBucket)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules.Rules) != 1 {
		t.Fatalf("history lifecycle: %+v, want one rule", rules.Rules)
	}
	r := rules.Rules[0]
	if r.ID != archive.HistoryRuleID || r.Status != "Enabled" || r.Expiration.Days != 365 || r.RuleFilter.Prefix != "history/" {
		t.Errorf("history rule %s %s: expires after %d days, prefix %q; want enabled, 365 days, history/",
			r.ID, r.Status, r.Expiration.Days, r.RuleFilter.Prefix)
	}

	lock, mode, validity, unit, err := e.client.GetObjectLockConfig(e.ctx, cfg.RecordsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if lock != "Enabled" || mode == nil || *mode != minio.Compliance || validity == nil || *validity != 7 || unit == nil || *unit != minio.Years {
		t.Errorf("records object lock %q, mode %v, %v %v; want Enabled, COMPLIANCE, 7 YEARS", lock, deref(mode), deref(validity), deref(unit))
	}
	if v, err := e.client.GetBucketVersioning(e.ctx, cfg.RecordsBucket); err != nil || !v.Enabled() {
		t.Errorf("records versioning %+v, %v; want enabled", v, err)
	}

	cfg = e.config(minio.Governance)
	if err := e.client.MakeBucket(e.ctx, cfg.RecordsBucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	unlocked, err := archive.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := unlocked.EnsureBuckets(e.ctx); err == nil || !strings.Contains(err.Error(), "no object lock") {
		t.Errorf("a records bucket without object lock: %v; want refused", err)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// Epoch advances and force releases are copied once each, as their JSON,
// retained for seven years; MinIO refuses to delete one inside its
// retention, in either mode, and only governance mode lets a bypass
// through.
func TestRecordsAreCopiedOnceAndLocked(t *testing.T) {
	for _, mode := range []minio.RetentionMode{minio.Governance, minio.Compliance} {
		t.Run(string(mode), func(t *testing.T) { testRecords(t, mode) })
	}
}

func testRecords(t *testing.T, mode minio.RetentionMode) {
	e := newEnv(t)
	in, neighbours := dayEvents()
	all := append(slices.Clone(neighbours), in...)
	if err := e.store.Insert(e.ctx, all); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(mode)
	a := e.archive(t, cfg)

	since := day // the epoch advance of the day before is not copied
	want := map[string]audit.Event{}
	for _, ev := range all {
		if (ev.Kind == audit.EpochAdvance || ev.Kind == audit.ForceRelease) && !ev.At.Before(since) {
			want[archive.RecordKey(ev)] = ev
		}
	}
	if len(want) != 3 {
		t.Fatalf("%d records expected, want 3", len(want))
	}
	for _, ev := range want {
		if ev.Kind == audit.EpochAdvance && archive.RecordKey(ev) != "records/epoch_advance/c0ffee/19.json" {
			t.Errorf("record key %s", archive.RecordKey(ev))
		}
	}
	done, err := a.CopyRecords(e.ctx, since)
	if err != nil || done.Copied != 3 || done.Present != 0 || len(done.Differing) != 0 {
		t.Fatalf("CopyRecords = %+v, %v; want 3 copied", done, err)
	}
	done, err = a.CopyRecords(e.ctx, since.Add(-time.Hour))
	if err != nil || done.Copied != 1 || done.Present != 3 || len(done.Differing) != 0 {
		t.Fatalf("CopyRecords again, from an hour earlier = %+v, %v; want 1 copied, 3 present", done, err)
	}
	want[archive.RecordKey(neighbours[0])] = neighbours[0]

	versions := map[string][]string{}
	for o := range e.client.ListObjects(e.ctx, cfg.RecordsBucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		versions[o.Key] = append(versions[o.Key], o.VersionID)
	}
	if len(versions) != len(want) {
		t.Errorf("records bucket holds %v; want %d records", versions, len(want))
	}
	for key, ev := range want {
		if len(versions[key]) != 1 {
			t.Errorf("%s has versions %v; want one", key, versions[key])
			continue
		}
		data, _ := get(t, e, cfg.RecordsBucket, key, minio.GetObjectOptions{})
		var got audit.Event
		if err := json.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(got, ev) {
			t.Errorf("%s: %s (%v); want %+v", key, data, err, ev)
		}
		m, until, err := e.client.GetObjectRetention(e.ctx, cfg.RecordsBucket, key, "")
		if err != nil || m == nil || *m != mode || until == nil || !until.Equal(now.AddDate(7, 0, 0)) {
			t.Errorf("%s retention %v until %v (%v); want %s until %s", key, deref(m), deref(until), err, mode, now.AddDate(7, 0, 0))
		}
	}

	// An object put with no retention of its own gets the bucket's.
	if _, err := e.client.PutObject(e.ctx, cfg.RecordsBucket, "plain", strings.NewReader("x"), 1,
		minio.PutObjectOptions{SendContentMd5: true}); err != nil {
		t.Fatal(err)
	}
	m, until, err := e.client.GetObjectRetention(e.ctx, cfg.RecordsBucket, "plain", "")
	if inSevenYears := time.Now().AddDate(7, 0, 0); err != nil || m == nil || *m != mode || until == nil ||
		until.Before(inSevenYears.Add(-time.Hour)) || until.After(inSevenYears.Add(time.Hour)) {
		t.Errorf("default retention %v until %v (%v); want %s until %s", deref(m), deref(until), err, mode, inSevenYears)
	}

	// A delete of the record's version inside its retention is refused,
	// and the record is still there.
	key := "records/epoch_advance/c0ffee/19.json"
	version := versions[key][0]
	err = e.client.RemoveObject(e.ctx, cfg.RecordsBucket, key, minio.RemoveObjectOptions{VersionID: version})
	if !isRetentionError(err) {
		t.Fatalf("deleting %s inside its retention: %v; want refused by retention", key, err)
	}
	r := minio.ToErrorResponse(err)
	t.Logf("MinIO refused the delete: HTTP %d, code %q: %s", r.StatusCode, r.Code, r.Message)
	stillThere := func(what string) {
		t.Helper()
		if _, err := e.client.StatObject(e.ctx, cfg.RecordsBucket, key, minio.StatObjectOptions{VersionID: version}); err != nil {
			t.Errorf("%s: the record is gone: %v", what, err)
		}
	}
	stillThere("after the delete")

	// A delete naming no version only hides the record behind a delete
	// marker; the version stays.
	if err := e.client.RemoveObject(e.ctx, cfg.RecordsBucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	stillThere("after a delete marker")

	// Governance retention gives way to a bypass (so the refusal above was
	// the retention's); compliance retention to nothing.
	err = e.client.RemoveObject(e.ctx, cfg.RecordsBucket, key, minio.RemoveObjectOptions{VersionID: version, GovernanceBypass: true})
	switch mode {
	case minio.Governance:
		if err != nil {
			t.Errorf("a governance bypass was refused: %v", err)
		}
	case minio.Compliance:
		if !isRetentionError(err) {
			t.Errorf("a bypass of compliance retention: %v; want refused", err)
		}
		stillThere("after a bypass")
	}
}

// isRetentionError is MinIO refusing to delete an object version under
// retention.
func isRetentionError(err error) bool {
	r := minio.ToErrorResponse(err)
	return err != nil && r.Code == "InvalidRequest" && strings.Contains(r.Message, "WORM protected")
}

// RunDaily exports each day Delay after it ended, from the last due one
// on, and copies the records.
func TestRunDaily(t *testing.T) {
	e := newEnv(t)
	in, neighbours := dayEvents()
	if err := e.store.Insert(e.ctx, append(slices.Clone(neighbours), in...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	start := day.Add(12 * time.Hour) // the 29th is due, the 30th is not
	clock := &autoClock{now: start, stop: day.Add(72*time.Hour + 30*time.Minute), cancel: cancel}
	cfg := e.config(minio.Governance)
	cfg.Clock, cfg.Delay, cfg.ReexportDays = clock, time.Hour, -1
	a := e.archive(t, cfg)
	if err := a.RunDaily(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// 29th at start; 30th on Dec 1 at 01:00; Dec 1 on the 2nd at 01:00;
	// stopped before Dec 2 is due (the 3rd at 01:00).
	var keys []string
	for o := range e.client.ListObjects(e.ctx, cfg.HistoryBucket, minio.ListObjectsOptions{Recursive: true}) {
		keys = append(keys, o.Key)
	}
	wantKeys := []string{"history/2026/11/29/events.parquet", "history/2026/11/30/events.parquet", "history/2026/12/01/events.parquet"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("history %v, want %v", keys, wantKeys)
	}
	if waits := clock.waits(); !slices.Equal(waits, []time.Duration{13 * time.Hour, 24 * time.Hour, 24 * time.Hour}) {
		t.Errorf("waited %v", waits)
	}
	var records int
	for range e.client.ListObjects(e.ctx, cfg.RecordsBucket, minio.ListObjectsOptions{Recursive: true}) {
		records++
	}
	if records != 4 {
		t.Errorf("%d records copied, want 4", records)
	}
}

// sharedProgress is the Progress two archivers share, as the arbiters
// share it in etcd.
type sharedProgress struct {
	mu   sync.Mutex
	last time.Time
}

func (p *sharedProgress) Last(context.Context) (time.Time, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, !p.last.IsZero(), nil
}

func (p *sharedProgress) Done(_ context.Context, day time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = day
	return nil
}

// An archiver elected after another resumes after the last day done, so
// days nobody was running for are not skipped; and events the store got
// after their day was exported reach it when the days after it run. The
// broken variant forgets the progress (each archiver on its own), as the
// code before Progress did, and skips days.
func TestRunDailyResumesAfterAnotherArchiverAndTakesLateEvents(t *testing.T) {
	e := newEnv(t)
	in, _ := dayEvents()
	if err := e.store.Insert(e.ctx, in); err != nil {
		t.Fatal(err)
	}
	// run is one archiver from start until its first wait.
	run := func(cfg archive.Config, p archive.Progress, start time.Time) {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		cfg.Clock, cfg.Delay = &autoClock{now: start, stop: start.Add(time.Hour), cancel: cancel}, time.Hour
		if err := e.archive(t, cfg).RunDaily(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(cfg archive.Config) []string {
		var out []string
		for o := range e.client.ListObjects(e.ctx, cfg.HistoryBucket, minio.ListObjectsOptions{Recursive: true}) {
			out = append(out, o.Key)
		}
		return out
	}
	events := func(cfg archive.Config, d time.Time) string {
		info, err := e.client.StatObject(e.ctx, cfg.HistoryBucket, archive.HistoryKey(d), minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return info.UserMetadata["Events"]
	}
	cfg := e.config(minio.Governance)
	cfg.ReexportDays = 1
	progress := &sharedProgress{}
	run(cfg, progress, day.Add(26*time.Hour)) // Dec 1 02:00: the 30th is due
	first := events(cfg, day)
	// A grant of the 30th the store got only now (it was down).
	late := audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: 9001, Key: "team-a/late/1", Kind: audit.Grant,
		At: day.Add(23 * time.Hour), Namespace: "team-a", Class: "default", Identity: "erin", Session: 9}
	if err := e.store.Insert(e.ctx, []audit.Event{late}); err != nil {
		t.Fatal(err)
	}
	// The archiver stopped; another is elected on Dec 4 at 02:00.
	run(cfg, progress, day.Add(98*time.Hour))
	want := []string{"history/2026/11/29/events.parquet", "history/2026/11/30/events.parquet", "history/2026/12/01/events.parquet",
		"history/2026/12/02/events.parquet", "history/2026/12/03/events.parquet"}
	if got := keys(cfg); !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	if got := events(cfg, day); got == first {
		t.Errorf("the 30th still has %s events after a late one was stored and the 1st ran", got)
	}

	broken := e.config(minio.Governance)
	broken.ReexportDays = -1
	run(broken, nil, day.Add(26*time.Hour))
	run(broken, nil, day.Add(98*time.Hour))
	if got := keys(broken); slices.Contains(got, "history/2026/12/01/events.parquet") {
		t.Fatalf("the broken variant exported %v: this test cannot tell the two apart", got)
	}
}

// A record is put only if absent: MinIO refuses a second conditional put
// of the key in the locked bucket, so two archivers racing between their
// stat and their put leave one version, not two kept for years.
func TestARecordIsPutOnlyIfAbsent(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(minio.Governance)
	e.archive(t, cfg)
	put := func() error {
		opts := minio.PutObjectOptions{Mode: minio.Governance, RetainUntilDate: time.Now().AddDate(0, 0, 1), SendContentMd5: true}
		opts.SetMatchETagExcept("*")
		_, err := e.client.PutObject(e.ctx, cfg.RecordsBucket, "records/x/1.json", strings.NewReader("{}"), 2, opts)
		return err
	}
	if err := put(); err != nil {
		t.Fatal(err)
	}
	if err := put(); minio.ToErrorResponse(err).StatusCode != 412 {
		t.Fatalf("a second put if absent: %v, want 412 Precondition Failed", err)
	}
	n := 0
	for range e.client.ListObjects(e.ctx, cfg.RecordsBucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		n++
	}
	if n != 1 {
		t.Fatalf("%d versions of the record, want 1", n)
	}
}

// autoClock moves on by each wait at once, and ends the run (cancel)
// once past stop.
type autoClock struct {
	mu     sync.Mutex
	now    time.Time
	stop   time.Time
	cancel func()
	waited []time.Duration
}

func (c *autoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *autoClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waited = append(c.waited, d)
	ch := make(chan time.Time, 1)
	if c.now.After(c.stop) {
		c.cancel()
	} else {
		ch <- c.now
	}
	return ch
}

func (c *autoClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.waited)
}

// A force-release with revoke_session is one revision of several events:
// each hold's end and, keyed "", the session's, every one carrying the
// force record. Each is kept as a locked record of its own, even when the
// revision straddles two pages: the first of them is not the only one
// locked away, so the locked record always says who asked, who approved
// and why (issue 32).
func TestEveryEventOfAForceReleaseIsALockedRecord(t *testing.T) {
	e := newEnv(t)
	const force = `{"action":"a1","kind":"force_release","requester":"https://idp.test#u-alice (alice)","approver":"https://idp.test#u-bob (bob)","reason":"stuck job","revoke_session":true}`
	at := day.Add(time.Hour)
	ended := func(key string) audit.Event {
		return audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: 40, Key: key, Kind: audit.ForceRelease, At: at,
			Namespace: "team-a", Class: "default", Identity: "erin", Instance: "erin-pod-1", Session: 0x1f, Epoch: 4, Detail: force}
	}
	session := ended("") // sorts first in its revision
	session.Namespace, session.Class, session.TTLSeconds = "", "", 15
	revision := []audit.Event{session, ended("team-a/jobs/1"), ended("team-a/jobs/2"), ended("team-a/jobs/3")}
	advance := audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: 41, Kind: audit.EpochAdvance, At: at, Epoch: 5, Detail: "epoch 5"}
	if err := e.store.Insert(e.ctx, append(slices.Clone(revision), advance)); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(minio.Governance)
	cfg.PageSize = 3 // the revision straddles two pages
	a := e.archive(t, cfg)
	done, err := a.CopyRecords(e.ctx, day)
	if err != nil {
		t.Fatal(err)
	}
	if done.Copied != len(revision)+1 || len(done.Differing) != 0 {
		t.Errorf("CopyRecords = %+v; want %d copied, nothing differing", done, len(revision)+1)
	}

	recs := lockedRecords(t, e, cfg.RecordsBucket)
	for _, want := range append(slices.Clone(revision), advance) {
		got, ok := recs[recordID(want)]
		if !ok {
			t.Errorf("no record of %s %q (session %x) at revision %d; the bucket holds %v", want.Kind, want.Key, want.Session, want.Revision, slices.Sorted(maps.Keys(recs)))
			continue
		}
		if !reflect.DeepEqual(got.event, want) {
			t.Errorf("%s: %+v; want %+v", got.key, got.event, want)
		}
		if got.versions != 1 || got.mode != minio.Governance || !got.until.Equal(now.AddDate(7, 0, 0)) {
			t.Errorf("%s: %d versions, retained %s until %s; want one, governance until %s", got.key, got.versions, got.mode, got.until, now.AddDate(7, 0, 0))
		}
		if want.Kind == audit.ForceRelease {
			for _, who := range []string{"alice", "bob", "stuck job"} {
				if !strings.Contains(got.event.Detail, who) {
					t.Errorf("%s: detail %q does not say %q", got.key, got.event.Detail, who)
				}
			}
		}
	}
	if len(recs) != len(revision)+1 {
		t.Errorf("records %v; want one per event", slices.Sorted(maps.Keys(recs)))
	}
	for ev, want := range map[*audit.Event]string{
		&advance:     "records/epoch_advance/c0ffee/41.json", // as before
		&revision[0]: "records/force_release/c0ffee/40/session-000000000000001f.json",
		&revision[1]: "records/force_release/c0ffee/40/key-" + keyDigest("team-a/jobs/1") + ".json",
	} {
		if got := recs[recordID(*ev)].key; got != want {
			t.Errorf("the record of %s %q is at %q, want %s", ev.Kind, ev.Key, got, want)
		}
	}

	again, err := a.CopyRecords(e.ctx, day)
	if err != nil || again.Copied != 0 || again.Present != len(revision)+1 || len(again.Differing) != 0 {
		t.Fatalf("CopyRecords again = %+v, %v; want all %d present", again, err, len(revision)+1)
	}
}

// lockedRecord is one object of the records bucket, read back.
type lockedRecord struct {
	key      string
	event    audit.Event
	versions int
	mode     minio.RetentionMode
	until    time.Time
}

// recordID is an event's row key in the store: cluster, revision, key.
func recordID(e audit.Event) string { return fmt.Sprintf("%s/%d/%s", e.ClusterID, e.Revision, e.Key) }

// lockedRecords reads every record of bucket, by the row key of the event
// it holds, with its versions and retention; whatever the layout.
func lockedRecords(t *testing.T, e env, bucket string) map[string]lockedRecord {
	t.Helper()
	versions := map[string]int{}
	for o := range e.client.ListObjects(e.ctx, bucket, minio.ListObjectsOptions{Prefix: "records/", Recursive: true, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		versions[o.Key]++
	}
	out := map[string]lockedRecord{}
	for key, n := range versions {
		data, _ := get(t, e, bucket, key, minio.GetObjectOptions{})
		r := lockedRecord{key: key, versions: n}
		if err := json.Unmarshal(data, &r.event); err != nil {
			t.Fatalf("%s: %s is no event: %v", key, data, err)
		}
		m, until, err := e.client.GetObjectRetention(e.ctx, bucket, key, "")
		if err != nil {
			t.Fatalf("%s retention: %v", key, err)
		}
		if m != nil && until != nil {
			r.mode, r.until = *m, *until
		}
		out[recordID(r.event)] = r
	}
	return out
}

// keyDigest is how a record's object names its lock key.
func keyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// A lock key as long as the API allows, or of nothing but slashes, still
// names a record S3 takes: every record after it is locked away too.
func TestARecordOfAnyLockKeyIsCopied(t *testing.T) {
	e := newEnv(t)
	long := "team-a/" + strings.Repeat("x", lockkey.MaxLen-len("team-a/"))
	slashes := "team-a/" + strings.Repeat("/", 250)
	var evs []audit.Event
	for i, k := range []string{long, slashes, "team-a/after"} {
		evs = append(evs, audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: 50, Key: k, Kind: audit.ForceRelease,
			At: day.Add(time.Duration(i) * time.Second), Namespace: "team-a", Detail: "requested by alice, approved by bob: stuck"})
	}
	if err := e.store.Insert(e.ctx, evs); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(minio.Governance)
	a := e.archive(t, cfg)
	got, err := a.CopyRecords(e.ctx, day)
	if err != nil || got.Copied != len(evs) || len(got.Failed) != 0 {
		t.Fatalf("CopyRecords = %+v, %v; want all %d copied", got, err, len(evs))
	}
	recs := lockedRecords(t, e, cfg.RecordsBucket)
	for _, ev := range evs {
		if r, ok := recs[recordID(ev)]; !ok || r.event.Key != ev.Key {
			t.Errorf("no record of the key of %d bytes", len(ev.Key))
		}
	}
}
