// Package minioserver starts a local MinIO server for dev and tests.
//
// It runs the repository's bin/minio (`make minio`) on a free loopback
// port, its data and log under one directory: the audit archive of
// `lockplane dev` and the S3 server of the tests. Clients reach it over plain HTTP on loopback.
package minioserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/childproc"
	"github.com/lockplane/lockplane/services/loopport"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// stopGrace is how long Stop lets the server shut down before killing it.
const stopGrace = 10 * time.Second

// Config is a server to start.
type Config struct {
	// Bin is the minio binary; Dir holds its data (Dir/data, kept across
	// starts) and its log (Dir/minio.log).
	Bin, Dir string
	// User and Password are the root credentials (a password of at least
	// eight characters: MinIO refuses shorter ones).
	User, Password string
}

// Server is a running MinIO server.
type Server struct {
	endpoint string
	dir      string
	proc     *childproc.Process
}

// Start starts a server and returns once it serves signed S3 calls.
// ctx bounds the start only, 60 s when it has no deadline.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if _, err := os.Stat(cfg.Bin); err != nil {
		return nil, fmt.Errorf("minioserver: %w (build it with `make minio`)", err)
	}
	if cfg.User == "" || len(cfg.Password) < 8 {
		return nil, errors.New("minioserver: a user and a password of at least 8 characters are required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := loopport.Reserve(1)
	if err != nil {
		return nil, err
	}
	// The password by file, not in the environment others may read.
	pwFile := filepath.Join(dir, "root-password")
	if err := os.WriteFile(pwFile, []byte(cfg.Password), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	s := &Server{endpoint: fmt.Sprintf("127.0.0.1:%d", ports[0]), dir: dir}
	// The console listens on an ephemeral loopback port and is off.
	cmd := exec.Command(cfg.Bin, "server", filepath.Join(dir, "data"), "--quiet",
		"--address", s.endpoint, "--console-address", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+cfg.User, "MINIO_ROOT_PASSWORD_FILE="+pwFile,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Stdout, cmd.Stderr = log, log
	if s.proc, err = childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("minioserver: %w", err)
	}
	if err := s.awaitReady(ctx, cfg); err != nil {
		s.Stop()
		return nil, fmt.Errorf("minioserver: %v; see %s", err, filepath.Join(dir, "minio.log"))
	}
	return s, nil
}

// awaitReady waits for the liveness probe, then for a signed call to be
// served: MinIO answers the probe before its object layer and IAM are up.
func (s *Server) awaitReady(ctx context.Context, cfg Config) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, childproc.DefaultStartTimeout)
		defer cancel()
	}
	if err := s.proc.Await(ctx, "http://"+s.endpoint+"/minio/health/live"); err != nil {
		return err
	}
	c, err := minio.New(s.endpoint, &minio.Options{Creds: credentials.NewStaticV4(cfg.User, cfg.Password, "")})
	if err != nil {
		return err
	}
	return AwaitReady(ctx, c, "lockplane-ready-probe")
}

// Endpoint is the server's host:port.
func (s *Server) Endpoint() string { return s.endpoint }

// Dir is the server's directory.
func (s *Server) Dir() string { return s.dir }

// Stop asks the server to shut down, kills it if it has not within a few
// seconds, and returns once it has exited. Its directory stays.
func (s *Server) Stop() { s.proc.Stop(stopGrace) }

// AwaitReady returns once the MinIO behind c answers a signed call: a
// MinIO just started answers its liveness probe before its object layer
// and IAM are up, and refuses calls until then. bucket need not exist.
// ctx bounds the wait.
func AwaitReady(ctx context.Context, c *minio.Client, bucket string) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.BucketExists(cctx, bucket)
		cancel()
		code := minio.ToErrorResponse(err).Code
		if err == nil || (code != "" && code != "XMinioServerNotInitialized" && code != "ServiceUnavailable") {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("minioserver: MinIO is not ready: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
