package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/minio/minio-go/v7"
	"github.com/parquet-go/parquet-go"
)

// Row is an audit.Event as a row of a history file: every field a column
// named as in the ClickHouse table, At a timestamp in milliseconds (UTC).
type Row struct {
	ClusterID    string    `parquet:"cluster_id,dict"`
	Cluster      string    `parquet:"cluster,dict"`
	Revision     int64     `parquet:"revision"`
	Key          string    `parquet:"key"`
	Kind         string    `parquet:"kind,dict"`
	At           time.Time `parquet:"at,timestamp(millisecond:utc)"`
	Namespace    string    `parquet:"namespace,dict"`
	Class        string    `parquet:"class,dict"`
	Identity     string    `parquet:"identity"`
	Instance     string    `parquet:"instance"`
	Session      int64     `parquet:"session"`
	PrevIdentity string    `parquet:"prev_identity"`
	PrevSession  int64     `parquet:"prev_session"`
	WaitedMs     int64     `parquet:"waited_ms"`
	TTLSeconds   int64     `parquet:"ttl_seconds"`
	Epoch        uint32    `parquet:"epoch"`
	Detail       string    `parquet:"detail"`
}

// RowOf is e as a history row.
func RowOf(e audit.Event) Row {
	return Row{ClusterID: e.ClusterID, Cluster: e.Cluster, Revision: e.Revision, Key: e.Key, Kind: string(e.Kind),
		At: e.At.UTC(), Namespace: e.Namespace, Class: e.Class, Identity: e.Identity, Instance: e.Instance,
		Session: e.Session, PrevIdentity: e.PrevIdentity, PrevSession: e.PrevSession, WaitedMs: e.WaitedMs, TTLSeconds: e.TTLSeconds, Epoch: e.Epoch, Detail: e.Detail}
}

// Event is the row as an audit.Event; At is in UTC.
func (r Row) Event() audit.Event {
	return audit.Event{ClusterID: r.ClusterID, Cluster: r.Cluster, Revision: r.Revision, Key: r.Key, Kind: audit.Kind(r.Kind),
		At: r.At.UTC(), Namespace: r.Namespace, Class: r.Class, Identity: r.Identity, Instance: r.Instance,
		Session: r.Session, PrevIdentity: r.PrevIdentity, PrevSession: r.PrevSession, WaitedMs: r.WaitedMs, TTLSeconds: r.TTLSeconds, Epoch: r.Epoch, Detail: r.Detail}
}

// Object is one archived object.
type Object struct {
	Bucket string
	Key    string
	Size   int64
	SHA256 string // hex, also in the object's user metadata (ChecksumKey)
	Events int
}

const historyPrefix = "history/"

// HistoryKey is the object key of day's (UTC) history.
func HistoryKey(day time.Time) string {
	return historyPrefix + day.UTC().Format("2006/01/02") + "/events.parquet"
}

// Day is the UTC day holding t, as its first instant.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// ExportDay writes every event of day (the UTC day holding it) to one
// Parquet file, HistoryKey(day) in the history bucket, replacing the one
// there: rows in the order (time, cluster ID, revision, key), so the
// same events give the same bytes. A day that has not ended is refused:
// its file would be missing the rest of it.
func (a *Archive) ExportDay(ctx context.Context, day time.Time) (Object, error) {
	from := Day(day)
	to := from.AddDate(0, 0, 1)
	if now := a.cfg.Clock.Now(); now.Before(to) {
		return Object{}, fmt.Errorf("archive: %s has not ended (it is %s)", from.Format(time.DateOnly), now.UTC().Format(time.RFC3339))
	}
	obj := Object{Bucket: a.cfg.HistoryBucket, Key: HistoryKey(from)}

	f, err := os.CreateTemp(a.cfg.TempDir, "lockplane-history-*.parquet")
	if err != nil {
		return Object{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum := sha256.New()
	counted := &countingWriter{w: io.MultiWriter(f, sum)}
	w := parquet.NewGenericWriter[Row](counted,
		parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(a.cfg.RowGroupRows),
		// Fixed, so a rebuilt binary writes the same bytes.
		parquet.CreatedBy("lockplane-audit-archive", "1", "-"),
		parquet.KeyValueMetadata("lockplane.day", from.Format(time.DateOnly)))
	rows := make([]Row, 0, a.cfg.PageSize)
	err = a.each(ctx, from, to, func(page []audit.Event) error {
		rows = rows[:0]
		for _, e := range page {
			rows = append(rows, RowOf(e))
		}
		_, err := w.Write(rows)
		obj.Events += len(rows)
		return err
	})
	if err != nil {
		return Object{}, fmt.Errorf("archive: exporting %s: %w", from.Format(time.DateOnly), err)
	}
	if err := w.Close(); err != nil {
		return Object{}, fmt.Errorf("archive: writing %s: %w", obj.Key, err)
	}
	obj.Size, obj.SHA256 = counted.n, hex.EncodeToString(sum.Sum(nil))

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Object{}, err
	}
	_, err = a.cfg.Client.PutObject(ctx, obj.Bucket, obj.Key, f, obj.Size, minio.PutObjectOptions{
		ContentType:  "application/vnd.apache.parquet",
		UserMetadata: map[string]string{ChecksumKey: obj.SHA256, "Events": strconv.Itoa(obj.Events)},
	})
	if err != nil {
		return Object{}, fmt.Errorf("archive: uploading %s: %w", obj.Key, err)
	}
	a.cfg.Logger.Info("archive: exported a day", "day", from.Format(time.DateOnly), "events", obj.Events, "bytes", obj.Size, "key", obj.Key)
	return obj, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
