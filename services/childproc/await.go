// Package childproc runs child processes and stops them for certain.
//
// It is the one supervisor of the server binaries of the embedded default
// and the tests (ClickHouse, MinIO), and of the servers and clients the
// gate and the benchmarks start, signal, kill and restart. A child dies
// with this process unless started with SurviveParent.
package childproc

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// DefaultStartTimeout bounds Await when its ctx has no deadline.
const DefaultStartTimeout = 60 * time.Second

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
