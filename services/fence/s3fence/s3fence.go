// Package s3fence is the reference fence for S3-compatible object stores
// (MinIO, Ceph RGW, S3). The mark is the object's own metadata, and the
// write is conditional on the object being the version whose mark was read:
//
//	HEAD object           -> ETag E, mark M      (absent: no ETag, M = 0)
//	refuse unless token > M
//	PUT object If-Match: E (If-None-Match: * when absent), mark = token
//
// A writer that read before another writer's PUT sends a stale ETag and the
// store answers 412: reported as fence.ErrStaleFence, never as a generic
// error. That holds only if every accepted PUT changes the ETag, and an
// ETag is the MD5 of the bytes: a PUT of the bytes the object already has
// would move the mark and leave the ETag, and a writer frozen since before
// it (force-released, say) would land after it with an older token. So a
// PUT whose bytes hash to the ETag read is refused (ErrUnchanged, nothing
// written). Copy it; the pause test kit proves a copy still fences.
package s3fence

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/minio/minio-go/v7"
)

// MetaKey is the user metadata key holding an object's mark
// (x-amz-meta-lockplane-fence).
const MetaKey = "Lockplane-Fence"

// Store is one bucket of fenced objects.
type Store struct {
	Client *minio.Client
	Bucket string
}

// Mark reads an object's mark and ETag; found is false when it is absent.
func (s Store) Mark(ctx context.Context, object string) (mark token.Token, etag string, found bool, err error) {
	info, err := s.Client.StatObject(ctx, s.Bucket, object, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return 0, "", false, nil
		}
		return 0, "", false, fmt.Errorf("s3fence: stat %s: %w", object, err)
	}
	v := info.UserMetadata[MetaKey]
	if v == "" {
		return 0, info.ETag, true, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, "", true, fmt.Errorf("s3fence: %s has a malformed %s", object, MetaKey)
	}
	return token.Token(n), info.ETag, true, nil
}

// ErrUnchanged means a Put was refused because the object already holds
// exactly its bytes: the PUT would not change the object's ETag, so it
// could not refuse a writer with an older token that read before it.
// Nothing was written and the mark did not move: until this holder's
// first write that changes the bytes, an older holder's write may still
// land, as before any holder's first write (package fence).
var ErrUnchanged = errors.New("s3fence: the object already holds these bytes; nothing written (a write must change the bytes to move the mark)")

// Put writes the object under tok if tok is greater than its mark and the
// object is unchanged since the mark was read. It returns
// fence.ErrStaleFence otherwise, and ErrUnchanged if the object already
// holds these bytes; nothing is written then. body is read into memory
// unless it is an io.ReadSeeker.
func (s Store) Put(ctx context.Context, tok token.Token, object string, body io.Reader, size int64, contentType string) error {
	body, sum, err := digest(body, size)
	if err != nil {
		return fmt.Errorf("s3fence: put %s: %w", object, err)
	}
	mark, etag, found, err := s.Mark(ctx, object)
	if err != nil {
		return err
	}
	if found && mark >= tok {
		return fence.ErrStaleFence
	}
	if found && strings.Trim(etag, `"`) == sum {
		return ErrUnchanged
	}
	opts := minio.PutObjectOptions{
		ContentType:  contentType,
		UserMetadata: map[string]string{MetaKey: strconv.FormatUint(uint64(tok), 10)},
		// One PUT, so the condition covers the whole object.
		DisableMultipart: true,
	}
	if found {
		opts.SetMatchETag(etag)
	} else {
		opts.SetMatchETagExcept("*")
	}
	if _, err := s.Client.PutObject(ctx, s.Bucket, object, body, size, opts); err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed {
			return fence.ErrStaleFence
		}
		return fmt.Errorf("s3fence: put %s: %w", object, err)
	}
	return nil
}

// digest is the hex MD5 of body's size bytes (a single-part PUT's ETag),
// and a reader of those bytes from their start.
func digest(body io.Reader, size int64) (io.Reader, string, error) {
	h := md5.New()
	if rs, ok := body.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, "", err
		}
		if _, err := io.CopyN(h, rs, size); err != nil {
			return nil, "", err
		}
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return nil, "", err
		}
		return rs, hex.EncodeToString(h.Sum(nil)), nil
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(io.MultiWriter(h, &buf), body, size); err != nil {
		return nil, "", err
	}
	return &buf, hex.EncodeToString(h.Sum(nil)), nil
}

// Get reads an object and its mark.
func (s Store) Get(ctx context.Context, object string) ([]byte, token.Token, error) {
	obj, err := s.Client.GetObject(ctx, s.Bucket, object, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return nil, 0, fence.ErrNoRecord
		}
		return nil, 0, err
	}
	info, err := obj.Stat()
	if err != nil {
		return nil, 0, err
	}
	n, _ := strconv.ParseUint(info.UserMetadata[MetaKey], 10, 64)
	return b, token.Token(n), nil
}
