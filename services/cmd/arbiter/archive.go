package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
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
	fs.StringVar(&a.credentials, "archive-credentials", "", "the archive's user: "+credentialsRule("archive")+" (the access key, then the secret key); the archiver, not root: it only checks the buckets' rules (made at deploy time) and adds objects")
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
	u, err := url.Parse(a.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return nil, fmt.Errorf("--archive: want MinIO's base URL without a path or credentials, e.g. https://minio:9000, got %q", redacted(a.url))
	}
	if a.credentials == "" {
		return nil, errors.New("--archive-credentials: required with --archive")
	}
	c, err := readCredentials("--archive-credentials", a.credentials, "archive")
	if err != nil {
		return nil, err
	}
	access, secret := c["archive"].user, c["archive"].password
	mode := minio.RetentionMode(strings.ToUpper(a.recordsMode))
	if !mode.IsValid() {
		return nil, fmt.Errorf("--archive-records-mode: want COMPLIANCE or GOVERNANCE, got %q", a.recordsMode)
	}
	if a.historyDays < 1 || a.recordsYears < 1 {
		return nil, errors.New("--archive-history-days and --archive-records-years: must be at least 1")
	}
	opts := &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Secure: u.Scheme == "https"}
	if a.ca != "" {
		if u.Scheme != "https" {
			return nil, errors.New("--archive-ca: only with an https --archive")
		}
		pem, err := os.ReadFile(a.ca)
		if err != nil {
			return nil, fmt.Errorf("--archive-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--archive-ca: no certificates in %s", a.ca)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		opts.Transport = tr
	}
	cli, err := minio.New(u.Host, opts)
	if err != nil {
		return nil, fmt.Errorf("--archive: %w", err)
	}
	return archive.New(archive.Config{Store: store, Client: cli, HistoryBucket: a.historyBucket, RecordsBucket: a.recordsBucket,
		RecordsMode: mode, HistoryDays: a.historyDays, RecordsYears: uint(a.recordsYears), Logger: log})
}
