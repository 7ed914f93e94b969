// Package archive keeps audit history beyond the ClickHouse store, in
// MinIO (issue 14):
//
//   - every UTC day's events as one Parquet file,
//     history/YYYY/MM/DD/events.parquet in the history bucket, whose
//     lifecycle rule expires objects a year after they were written;
//   - every epoch advance and every event of a force release as a small
//     JSON object in the records bucket, which has object lock on: each
//     record is retained (compliance mode in production) for seven years,
//     and MinIO refuses to delete it before then. An advance is
//     records/epoch_advance/<cluster_id>/<revision>.json; a force release
//     is one object per event under
//     records/force_release/<cluster_id>/<revision>/, named by the
//     key-<lock key digest> or session-<lease hex> (RecordKey), each carrying
//     the force record: who asked, who approved, why.
//
// An Archive reads ClickHouse a page at a time, so a day of any size is
// exported in bounded memory (the Parquet file is built in a temporary
// file). Exporting a day again overwrites it with the same bytes; copying
// records again copies only the missing ones. RunDaily does both once a
// day for a scheduler that has nothing else to do.
package archive

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/minio/minio-go/v7"
)

// MaxPageSize is the most events one page may ask for: the audit store's
// own cap (chstore.MaxLimit; source_test.go keeps them equal).
const MaxPageSize = 10000

// Source is where the archive reads its events: the audit store
// (chstore.Store) in production.
type Source interface {
	// Between is chstore.Store.Between: a page of the events with
	// from <= At < to (no bound when to is zero) after the cursor, of
	// the kinds given (every kind when none).
	Between(ctx context.Context, from, to time.Time, after audit.Cursor, limit int, kinds ...audit.Kind) ([]audit.Event, error)
}

// Clock is the time source of an Archive; tests replace it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of Config.
const (
	DefaultHistoryDays     = 365
	DefaultRecordsYears    = 7
	DefaultRowGroupRows    = 100_000
	DefaultDelay           = time.Hour
	DefaultRecordsLookback = 7 * 24 * time.Hour
	DefaultRetryEvery      = 10 * time.Minute
	DefaultReexportDays    = 2
	DefaultMaxCatchUpDays  = 31
)

// Config is an archive: where it reads, where it writes, and how long
// what it writes is kept.
type Config struct {
	Store  Source
	Client *minio.Client
	// HistoryBucket holds the daily Parquet files; RecordsBucket the
	// locked records. They must differ: object lock is a bucket's.
	HistoryBucket string
	RecordsBucket string
	// HistoryDays is how long a history object lives (365 when zero).
	HistoryDays int
	// RecordsMode is the records' retention mode: minio.Compliance when
	// empty (nobody, root included, can delete or shorten it), or
	// minio.Governance (a user with s3:BypassGovernanceRetention can).
	RecordsMode minio.RetentionMode
	// RecordsYears is how long a record is retained (7 when zero).
	RecordsYears uint
	// ManageBuckets: Prepare makes the buckets and sets their rules
	// (EnsureBuckets, as MinIO's root: `lockplane dev`). Without it
	// (the arbiter's default) Prepare only checks them (CheckBuckets):
	// they were made at deploy time, and the archiver's user may not
	// change them.
	ManageBuckets bool
	// PageSize is how many events one query reads (MaxPageSize when
	// zero); RowGroupRows how many rows a Parquet row group has.
	PageSize     int
	RowGroupRows int64
	// TempDir is where Parquet files are built (os.TempDir when empty).
	TempDir string
	// RunDaily: a day is exported Delay after it ended (1h when zero: the
	// tailer's lag, and replays, settle first); records are copied from
	// RecordsLookback before that day (7 days when zero), so a scheduler
	// that was down a few days misses none; a failed run is tried again
	// after RetryEvery (10m when zero).
	Delay           time.Duration
	RecordsLookback time.Duration
	RetryEvery      time.Duration
	// ReexportDays before each day are exported again with it (2 when
	// zero, none when negative); MaxCatchUpDays bounds the days done at
	// once after a pause (31 when zero).
	ReexportDays   int
	MaxCatchUpDays int
	Clock          Clock
	Logger         *slog.Logger
}

// Archive exports audit history from the store to MinIO.
type Archive struct{ cfg Config }

// New returns an archive of cfg, with its defaults filled in. It does
// not connect; Prepare makes or checks the buckets.
func New(cfg Config) (*Archive, error) {
	if cfg.Store == nil {
		return nil, errors.New("archive: a store is required")
	}
	// The buckets' part of cfg is checked and defaulted one way, Buckets'.
	b, err := (&Archive{cfg: cfg}).buckets().withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.HistoryDays, cfg.RecordsMode, cfg.RecordsYears = b.HistoryDays, b.RecordsMode, b.RecordsYears
	if cfg.PageSize <= 0 || cfg.PageSize > MaxPageSize {
		cfg.PageSize = MaxPageSize
	}
	if cfg.RowGroupRows <= 0 {
		cfg.RowGroupRows = DefaultRowGroupRows
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Delay <= 0 {
		cfg.Delay = DefaultDelay
	}
	if cfg.RecordsLookback <= 0 {
		cfg.RecordsLookback = DefaultRecordsLookback
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = DefaultRetryEvery
	}
	switch {
	case cfg.ReexportDays == 0:
		cfg.ReexportDays = DefaultReexportDays
	case cfg.ReexportDays < 0:
		cfg.ReexportDays = 0
	}
	if cfg.MaxCatchUpDays <= 0 {
		cfg.MaxCatchUpDays = DefaultMaxCatchUpDays
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Archive{cfg: cfg}, nil
}

// each calls f with every event of the kinds given (every kind when none)
// with from <= At < to (no bound when to is zero), in the order (time,
// cluster ID, revision, key), reading a page at a time.
func (a *Archive) each(ctx context.Context, from, to time.Time, f func([]audit.Event) error, kinds ...audit.Kind) error {
	var after audit.Cursor
	for {
		page, err := a.cfg.Store.Between(ctx, from, to, after, a.cfg.PageSize, kinds...)
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := f(page); err != nil {
				return err
			}
		}
		if len(page) < a.cfg.PageSize {
			return nil
		}
		after = audit.CursorOf(page[len(page)-1])
	}
}

// ChecksumKey is the user metadata key of an object's SHA-256 (hex), as
// minio-go returns it in ObjectInfo.UserMetadata.
const ChecksumKey = "Sha256"
