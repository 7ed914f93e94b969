package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/minio/minio-go/v7"
)

// RecordKinds are the kinds of event kept as locked records.
var RecordKinds = []audit.Kind{audit.EpochAdvance, audit.ForceRelease}

// RecordKey is the object key of e's record.
func RecordKey(e audit.Event) string {
	return fmt.Sprintf("records/%s/%s/%d.json", url.PathEscape(string(e.Kind)), url.PathEscape(e.ClusterID), e.Revision)
}

// Copied is what CopyRecords did.
type Copied struct {
	// Copied records were written; Present ones were there already.
	Copied, Present int
	// Differing are keys of records already there whose content is not
	// the event's now (say the store kept an earlier reading of its
	// time). A record is never rewritten: the first copy stays.
	Differing []string
}

// CopyRecords copies every epoch advance and force release at or after
// since that is not in the records bucket yet, each as its JSON
// (audit.Event) at RecordKey, retained for RecordsYears in RecordsMode
// from the copy. A record there already is left alone: under object lock
// a second put would add a version, not replace the first.
func (a *Archive) CopyRecords(ctx context.Context, since time.Time) (Copied, error) {
	var done Copied
	err := a.each(ctx, since, time.Time{}, func(page []audit.Event) error {
		for _, e := range page {
			if e.Kind == audit.EpochAdvance && e.Key != "" {
				continue // a hold the advance ended: the advance's own record says it
			}
			if err := a.copyRecord(ctx, e, &done); err != nil {
				return err
			}
		}
		return nil
	}, RecordKinds...)
	if err != nil {
		return done, fmt.Errorf("archive: copying records: %w", err)
	}
	if done.Copied > 0 || len(done.Differing) > 0 {
		a.cfg.Logger.Info("archive: copied records", "copied", done.Copied, "present", done.Present, "differing", done.Differing)
	}
	return done, nil
}

func (a *Archive) copyRecord(ctx context.Context, e audit.Event, done *Copied) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	body = append(body, '\n')
	raw := sha256.Sum256(body)
	sum := hex.EncodeToString(raw[:])
	key := RecordKey(e)

	info, err := a.cfg.Client.StatObject(ctx, a.cfg.RecordsBucket, key, minio.StatObjectOptions{})
	switch {
	case err == nil:
		done.Present++
		if info.UserMetadata[ChecksumKey] != sum {
			done.Differing = append(done.Differing, key)
		}
		return nil
	case minio.ToErrorResponse(err).Code != minio.NoSuchKey:
		return fmt.Errorf("stat %s: %w", key, err)
	}
	opts := minio.PutObjectOptions{
		ContentType:     "application/json",
		UserMetadata:    map[string]string{ChecksumKey: sum},
		Mode:            a.cfg.RecordsMode,
		RetainUntilDate: a.cfg.Clock.Now().UTC().AddDate(int(a.cfg.RecordsYears), 0, 0),
		SendContentMd5:  true, // S3 wants a checksum on a put with retention
	}
	// Only if still absent: another archiver (one deposed and not yet
	// stopped) may have put it since the stat, and a second locked version
	// would be kept for years.
	opts.SetMatchETagExcept("*")
	_, err = a.cfg.Client.PutObject(ctx, a.cfg.RecordsBucket, key, bytes.NewReader(body), int64(len(body)), opts)
	if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed {
		done.Present++
		return nil
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	done.Copied++
	return nil
}
