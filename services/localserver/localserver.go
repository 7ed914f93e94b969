// Package localserver runs a server binary as a child of this process for
// the embedded default and the tests (ClickHouse, MinIO): started, polled
// over HTTP until it answers, and stopped with a grace period. A child
// never outlives a parent that dies without stopping it.
package localserver

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"time"
)

// DefaultStartTimeout bounds Await when its ctx has no deadline.
const DefaultStartTimeout = 60 * time.Second

// Process is a running child.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the child exits
}

// Start starts cmd (its output already directed) as a child that is
// killed if this process dies first.
func Start(cmd *exec.Cmd) (*Process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// Await polls GET url until it answers 200, the child exits, or ctx ends
// (DefaultStartTimeout when ctx has no deadline).
func (p *Process) Await(ctx context.Context, url string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v", p.cmd.Path, p.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer %s: %w", p.cmd.Path, url, ctx.Err())
		case <-tick.C:
			resp, err := client.Get(url)
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

// Stop asks the child to shut down (SIGTERM), kills it if it has not
// within grace, and returns once it has exited.
func (p *Process) Stop(grace time.Duration) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	p.cmd.Process.Kill()
	<-p.done
}
