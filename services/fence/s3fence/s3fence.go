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
// error. Copy it; the pause test kit proves a copy still fences.
package s3fence

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

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

// Put writes the object under tok if tok is greater than its mark and the
// object is unchanged since the mark was read. It returns
// fence.ErrStaleFence otherwise; nothing is written then.
func (s Store) Put(ctx context.Context, tok token.Token, object string, body io.Reader, size int64, contentType string) error {
	mark, etag, found, err := s.Mark(ctx, object)
	if err != nil {
		return err
	}
	if found && mark >= tok {
		return fence.ErrStaleFence
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
