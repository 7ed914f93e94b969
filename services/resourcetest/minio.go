package resourcetest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
	cmd      *exec.Cmd
	dir      string
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
	minioOnce.Do(func() { mio, minioErr = startMinIO() })
	if minioErr != nil {
		unavailable(t, "MinIO", "build it with `make minio` (.ci/run does)", minioErr)
	}
	return mio
}

// StopMinIO stops the shared server if one was started.
func StopMinIO() {
	if mio != nil {
		mio.cmd.Process.Kill()
		mio.cmd.Wait()
		os.RemoveAll(mio.dir)
	}
}

func startMinIO() (*MinIO, error) {
	bin := os.Getenv("LOCKPLANE_MINIO")
	if bin == "" {
		root, err := repoRoot()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(root, "bin", "minio")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockplane-minio-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	console, err := freePort()
	if err != nil {
		return nil, err
	}
	m := &MinIO{Endpoint: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	m.cmd = exec.Command(bin, "server", filepath.Join(dir, "data"), "--quiet",
		"--address", m.Endpoint, "--console-address", fmt.Sprintf("127.0.0.1:%d", console))
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+MinIOUser, "MINIO_ROOT_PASSWORD="+MinIOPassword,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	log, _ := os.Create(filepath.Join(dir, "minio.log"))
	m.cmd.Stdout, m.cmd.Stderr = log, log
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	// Ready when its liveness endpoint answers.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.cmd.Process.Kill()
	return nil, fmt.Errorf("minio did not become live; see %s", filepath.Join(dir, "minio.log"))
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
