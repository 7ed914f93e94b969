package s3fence_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/s3fence"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// heldPut is a transport that stops the first PUT until released: the
// holder frozen between its Put's read of the mark and its write.
type heldPut struct {
	once     sync.Once
	reached  chan struct{}
	released chan struct{}
}

func (h *heldPut) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut {
		h.once.Do(func() { close(h.reached); <-h.released })
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A holder frozen between its Put's read of the mark and its write is
// force-released; the next holder writes the object's current bytes again
// (an idempotent rewrite: the ETag, the MD5 of the bytes, does not change);
// the old holder resumes. Its conditional PUT names the ETag it read, which
// still matches, so before, its write landed after the new holder's, and
// the mark went back from 30 to 20. Now the new holder's write, which could
// not change the ETag, is refused (nothing written, the mark not moved), so
// the old holder's write lands before the new holder's first: what every
// fence allows (package fence). Either way no write is accepted after a
// newer one, and the mark never goes back.
func TestAStaleWriterCannotLandAfterAnUnchangedRewrite(t *testing.T) {
	s, ctx := store(t)
	if err := put(ctx, s, tok(10), "x"); err != nil {
		t.Fatal(err)
	}
	m := resourcetest.StartMinIO(t)
	h := &heldPut{reached: make(chan struct{}), released: make(chan struct{})}
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(resourcetest.MinIOUser, resourcetest.MinIOPassword, ""), Transport: h})
	if err != nil {
		t.Fatal(err)
	}
	old := s3fence.Store{Client: c, Bucket: s.Bucket}
	oldDone := make(chan error, 1)
	go func() { oldDone <- put(ctx, old, tok(20), "y") }()
	select {
	case <-h.reached: // the old holder has read the mark and is frozen
	case err := <-oldDone:
		t.Fatalf("the old holder's put ended before its PUT: %v", err)
	}
	newErr := put(ctx, s, tok(30), "x") // granted after the force-release
	if newErr != nil && !errors.Is(newErr, s3fence.ErrUnchanged) {
		t.Fatalf("the new holder's rewrite: %v", newErr)
	}
	close(h.released)
	oldErr := <-oldDone
	if oldErr != nil && !errors.Is(oldErr, fence.ErrStaleFence) {
		t.Fatalf("the old holder's write: %v", oldErr)
	}
	b, mark, err := s.Get(ctx, "ledger.json")
	if err != nil {
		t.Fatal(err)
	}
	if newErr == nil && oldErr == nil {
		t.Fatalf("both writes accepted, the old holder's (token 20) after the new holder's (token 30): object %q, mark %v", b, mark)
	}
	if newErr == nil && (string(b) != "x" || mark != tok(30)) {
		t.Fatalf("object %q, mark %v; want the new holder's x under token 30", b, mark)
	}
}
