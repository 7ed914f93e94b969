package resourcetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit/archive/minioserver"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIO credentials of the test server.
const (
	MinIOUser     = "lockplane"
	MinIOPassword = "lockplane-test-secret"
)

// MinIO is a running MinIO server shared by a test binary.
type MinIO struct {
	Endpoint string
	srv      *minioserver.Server
}

var (
	minioOnce sync.Once
	mio       *MinIO
	minioErr  error
)

// StartMinIO returns the test binary's MinIO server (bin/minio, built by
// `make minio`), starting it on first use.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	NotShort(t, "a MinIO server")
	minioOnce.Do(func() { mio, minioErr = startMinIO() })
	if minioErr != nil {
		Unavailable(t, "MinIO", "build it with `make minio` (.ci/run does)", minioErr)
	}
	return mio
}

// StopMinIO stops the shared server if one was started.
func StopMinIO() {
	if mio != nil {
		mio.srv.Stop()
		os.RemoveAll(mio.srv.Dir())
	}
}

func startMinIO() (*MinIO, error) {
	bin := os.Getenv("LOCKPLANE_MINIO")
	if bin == "" {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(root, "bin", "minio")
	}
	dir, err := os.MkdirTemp("", "lockplane-minio-")
	if err != nil {
		return nil, err
	}
	srv, err := minioserver.Start(context.Background(), minioserver.Config{Bin: bin, Dir: dir, User: MinIOUser, Password: MinIOPassword})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &MinIO{Endpoint: srv.Endpoint(), srv: srv}, nil
}

// Client returns a client of the server.
func (m *MinIO) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(MinIOUser, MinIOPassword, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Bucket creates a fresh bucket for the test.
func (m *MinIO) Bucket(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("t%d", time.Now().UnixNano())
	if err := m.Client(t).MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}
