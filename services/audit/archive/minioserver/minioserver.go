// Package minioserver starts a local MinIO server (the repository's
// bin/minio, `make minio`) on a free loopback port, its data and log under
// one directory: the audit archive of `lockplane dev` and the S3 server of
// the tests. Clients reach it over plain HTTP on loopback.
package minioserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// startTimeout bounds the wait for a server to answer when ctx has no
// deadline; stopGrace is how long Stop lets it shut down before killing it.
const (
	startTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
)

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
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process exits
}

// Start starts a server and returns once its liveness endpoint answers.
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
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	s := &Server{endpoint: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, done: make(chan struct{})}
	// The console listens on an ephemeral loopback port and is off.
	s.cmd = exec.Command(cfg.Bin, "server", filepath.Join(dir, "data"), "--quiet",
		"--address", s.endpoint, "--console-address", "127.0.0.1:0")
	s.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+cfg.User, "MINIO_ROOT_PASSWORD="+cfg.Password,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// The server does not outlive a process that dies without Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("minioserver: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	if err := s.awaitLive(ctx); err != nil {
		s.Stop()
		return nil, fmt.Errorf("minioserver: %v; see %s", err, filepath.Join(dir, "minio.log"))
	}
	return s, nil
}

// Endpoint is the server's host:port.
func (s *Server) Endpoint() string { return s.endpoint }

// Dir is the server's directory.
func (s *Server) Dir() string { return s.dir }

// Stop asks the server to shut down, kills it if it has not within a few
// seconds, and returns once it has exited. Its directory stays.
func (s *Server) Stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return
	case <-time.After(stopGrace):
	}
	s.cmd.Process.Kill()
	<-s.done
}

// awaitLive polls the liveness endpoint until it answers, the server
// exits, or ctx ends.
func (s *Server) awaitLive(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("minio exited: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("minio did not become live: %w", ctx.Err())
		case <-tick.C:
			resp, err := client.Get("http://" + s.endpoint + "/minio/health/live")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

// freePort reserves a free loopback port, released before the server binds
// it: a clash in that window fails Start loudly.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, errors.Join(errors.New("minioserver: reserve a port"), err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
