package s3fence_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/s3fence"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopMinIO()
	os.Exit(code)
}

func tok(rev int64) token.Token { t, _ := token.Mint(1, rev); return t }

func store(t *testing.T) (s3fence.Store, context.Context) {
	m := resourcetest.StartMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return s3fence.Store{Client: m.Client(t), Bucket: m.Bucket(t)}, ctx
}

func put(ctx context.Context, s s3fence.Store, tk token.Token, body string) error {
	return s.Put(ctx, tk, "ledger.json", bytes.NewReader([]byte(body)), int64(len(body)), "application/json")
}

func TestPutOrdersWritesByToken(t *testing.T) {
	s, ctx := store(t)
	if err := put(ctx, s, tok(10), "v10"); err != nil {
		t.Fatalf("create (If-None-Match: *): %v", err)
	}
	if err := put(ctx, s, tok(20), "v20"); err != nil {
		t.Fatalf("newer: %v", err)
	}
	if err := put(ctx, s, tok(15), "stale"); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("older: %v, want ErrStaleFence", err)
	}
	if err := put(ctx, s, tok(20), "equal"); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("equal: %v, want ErrStaleFence", err)
	}
	b, mark, err := s.Get(ctx, "ledger.json")
	if err != nil || string(b) != "v20" || mark != tok(20) {
		t.Fatalf("object = %q mark %v (%v)", b, mark, err)
	}
}

// A writer whose read is overtaken by another writer's PUT is refused by
// the store itself (412), and that is reported as a stale fence.
func TestOvertakenWriterGetsPreconditionFailedAsStaleFence(t *testing.T) {
	s, ctx := store(t)
	if err := put(ctx, s, tok(10), "v10"); err != nil {
		t.Fatal(err)
	}
	_, etag, _, err := s.Mark(ctx, "ledger.json") // the slow writer's read
	if err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, s, tok(30), "v30"); err != nil { // overtaken
		t.Fatal(err)
	}
	opts := minio.PutObjectOptions{UserMetadata: map[string]string{s3fence.MetaKey: "999"}, DisableMultipart: true}
	opts.SetMatchETag(etag)
	_, err = s.Client.PutObject(ctx, s.Bucket, "ledger.json", bytes.NewReader([]byte("late")), 4, opts)
	if minio.ToErrorResponse(err).StatusCode != 412 {
		t.Fatalf("stale If-Match PUT: %v, want 412 from the store", err)
	}
	// And a create of an existing object is refused the same way.
	c := minio.PutObjectOptions{DisableMultipart: true}
	c.SetMatchETagExcept("*")
	_, err = s.Client.PutObject(ctx, s.Bucket, "ledger.json", bytes.NewReader([]byte("x")), 1, c)
	if minio.ToErrorResponse(err).StatusCode != 412 {
		t.Fatalf("If-None-Match: * on an existing object: %v, want 412", err)
	}
}

func TestConcurrentWritersOneWinsPerVersion(t *testing.T) {
	s, ctx := store(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var landed []token.Token
	for i := 1; i <= 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tk := tok(int64(100 + i))
			err := put(ctx, s, tk, tk.String())
			if err != nil && !errors.Is(err, fence.ErrStaleFence) {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				landed = append(landed, tk)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	b, mark, err := s.Get(ctx, "ledger.json")
	if err != nil {
		t.Fatal(err)
	}
	var max token.Token
	for _, l := range landed {
		if l > max {
			max = l
		}
	}
	// The object is the write of the highest token that landed, and no
	// landed write carried a lower token than one landed before it.
	if mark != max || string(b) != max.String() {
		t.Fatalf("object %q mark %v; highest landed %v of %d", b, mark, max, len(landed))
	}
}
