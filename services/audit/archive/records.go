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

// RecordKey is the object key of e's record, one per event of a revision
// (the store's row key: cluster, revision, lock key). A cluster's own
// event (no key, no session: an epoch advance) is
// records/<kind>/<cluster_id>/<revision>.json, as it always was; any
// other is records/<kind>/<cluster_id>/<revision>/<event>.json, <event>
// being key-<the first 32 hex digits of the lock key's SHA-256>, or
// session-<lease hex> for a session's end. A force-release with
// revoke_session ends several holds and a session at one revision, each
// event carrying the force record: each is kept, so none of them can be
// the only one locked away. The key is in the record; its digest names
// the object because a lock key may be 512 bytes of slashes, and S3
// refuses a name segment over 255.
func RecordKey(e audit.Event) string {
	rev := fmt.Sprintf("records/%s/%s/%d", url.PathEscape(string(e.Kind)), url.PathEscape(e.ClusterID), e.Revision)
	switch {
	case e.Key != "":
		sum := sha256.Sum256([]byte(e.Key))
		return rev + "/key-" + hex.EncodeToString(sum[:16]) + ".json"
	case e.Session != 0:
		return fmt.Sprintf("%s/session-%016x.json", rev, uint64(e.Session))
	default:
		return rev + ".json"
	}
}

// Copied is what CopyRecords did.
type Copied struct {
	// Copied records were written; Present ones were there already.
	Copied, Present int
	// Differing are keys of records already there whose content is not
	// the event's now (say the store kept an earlier reading of its
	// time). A record is never rewritten: the first copy stays.
	Differing []string
	// Failed are keys of records that could not be copied this time; the
	// next run tries them again (they are still missing).
	Failed []string
}

// Bounds of CopyRecords: each object call's deadline, and how many
// records in a row may fail before the store is taken to be down.
const (
	recordCall      = 30 * time.Second
	maxFailedInARow = 5
)

// CopyRecords copies every epoch advance and every event of a force
// release at or after since that is not in the records bucket yet, each
// as its JSON (audit.Event) at RecordKey, retained for RecordsYears in
// RecordsMode from the copy. Each event is its own object, so a revision
// straddling two pages is copied whole. A record there already is left
// alone: under object lock a second put would add a version, not replace
// the first.
func (a *Archive) CopyRecords(ctx context.Context, since time.Time) (Copied, error) {
	var done Copied
	var last error
	inARow := 0
	err := a.each(ctx, since, time.Time{}, func(page []audit.Event) error {
		for _, e := range page {
			if e.Kind == audit.EpochAdvance && e.Key != "" {
				continue // a hold the advance ended: the advance's own record says it
			}
			// One record that cannot be copied must not keep every later
			// one from being locked away: it is named, and the rest go on.
			if last = a.copyRecord(ctx, e, &done); last != nil {
				done.Failed = append(done.Failed, RecordKey(e))
				a.cfg.Logger.Warn("archive: a record was not copied; the next run tries again", "record", RecordKey(e), "err", last)
				if inARow++; inARow >= maxFailedInARow {
					return fmt.Errorf("%d records in a row failed, the last: %w", inARow, last)
				}
				continue
			}
			inARow = 0
		}
		return nil
	}, RecordKinds...)
	if err == nil && len(done.Failed) > 0 {
		err = fmt.Errorf("%d records not copied (%v), the last: %w", len(done.Failed), done.Failed, last)
	}
	if done.Copied > 0 || len(done.Differing) > 0 {
		a.cfg.Logger.Info("archive: copied records", "copied", done.Copied, "present", done.Present, "differing", done.Differing)
	}
	if err != nil {
		return done, fmt.Errorf("archive: copying records: %w", err)
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

	sctx, cancel := context.WithTimeout(ctx, recordCall)
	info, err := a.cfg.Client.StatObject(sctx, a.cfg.RecordsBucket, key, minio.StatObjectOptions{})
	cancel()
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
	pctx, cancel := context.WithTimeout(ctx, recordCall)
	_, err = a.cfg.Client.PutObject(pctx, a.cfg.RecordsBucket, key, bytes.NewReader(body), int64(len(body)), opts)
	cancel()
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
