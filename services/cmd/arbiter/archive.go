package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/internal/credfile"
	"github.com/lockplane/lockplane/services/internal/s3client"
	"github.com/minio/minio-go/v7"
)

// archiveFlags are the audit archive's: MinIO, its buckets and retention.
type archiveFlags struct {
	url, credentials, ca         string
	historyBucket, recordsBucket string
	recordsMode                  string
	historyDays, recordsYears    int
}

func (a *archiveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.url, "archive", "", "MinIO (S3) base URL of the audit archive, e.g. https://minio:9000: one arbiter of the region (elected) copies the audit store's history there every day; needs --audit-store and --archive-credentials")
	fs.StringVar(&a.credentials, "archive-credentials", "", "the archive's user: "+credfile.Rule("archive")+" (the access key, then the secret key); the archiver, not root: it only checks the buckets' rules (made at deploy time) and adds objects")
	fs.StringVar(&a.ca, "archive-ca", "", "CA bundle that signed the archive's serving certificate (PEM), for an https --archive")
	fs.StringVar(&a.historyBucket, "archive-history-bucket", "lockplane-history", "bucket of the daily Parquet history, expired by a lifecycle rule")
	fs.StringVar(&a.recordsBucket, "archive-records-bucket", "lockplane-records", "bucket of the epoch-advance and force-release records, under object lock")
	fs.StringVar(&a.recordsMode, "archive-records-mode", string(minio.Compliance), "the records' retention mode: COMPLIANCE (nobody can delete one early) or GOVERNANCE (a user allowed to bypass it can)")
	fs.IntVar(&a.historyDays, "archive-history-days", archive.DefaultHistoryDays, "days a history object lives")
	fs.IntVar(&a.recordsYears, "archive-records-years", archive.DefaultRecordsYears, "years a record is retained")
}

// open returns the archive of the flags, nil without --archive. It does
// not connect: MinIO may be down now and answer later.
func (a archiveFlags) open(store *chstore.Store, log *slog.Logger) (*archive.Archive, error) {
	if a.url == "" {
		if a.credentials != "" || a.ca != "" {
			return nil, errors.New("--archive-credentials, --archive-ca: given without --archive")
		}
		return nil, nil
	}
	if store == nil {
		return nil, errors.New("--archive: needs --audit-store, the history it copies")
	}
	if a.credentials == "" {
		return nil, errors.New("--archive-credentials: required with --archive")
	}
	c, err := credfile.Read("--archive-credentials", a.credentials, "archive")
	if err != nil {
		return nil, err
	}
	mode := minio.RetentionMode(strings.ToUpper(a.recordsMode))
	if !mode.IsValid() {
		return nil, fmt.Errorf("--archive-records-mode: want COMPLIANCE or GOVERNANCE, got %q", a.recordsMode)
	}
	if a.historyDays < 1 || a.recordsYears < 1 {
		return nil, errors.New("--archive-history-days and --archive-records-years: must be at least 1")
	}
	cli, err := s3client.Endpoint{URL: a.url, URLFlag: "--archive", CA: a.ca, CAFlag: "--archive-ca", User: c["archive"]}.Client()
	if err != nil {
		return nil, err
	}
	return archive.New(archive.Config{Store: store, Client: cli, HistoryBucket: a.historyBucket, RecordsBucket: a.recordsBucket,
		RecordsMode: mode, HistoryDays: a.historyDays, RecordsYears: uint(a.recordsYears), Logger: log})
}
