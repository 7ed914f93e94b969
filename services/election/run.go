package election

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// errTermEnded stands for a term whose f returned nil while ctx lasted,
// so that Retry campaigns again rather than stopping.
var errTermEnded = errors.New("election: the leader's job returned")

// Run is the singleton loop: it campaigns and leads (Lead, calling f) and,
// whenever a term ends while ctx lasts (deposed, f returned, or the
// campaign failed), calls ended with Lead's error (nil when f returned
// nil) and campaigns again after b's wait. It returns when ctx ends; it
// never leads two terms at once. ended may be nil.
func (e Election) Run(ctx context.Context, b Backoff, f func(ctx context.Context, leader clientv3.Cmp) error, ended func(err error)) {
	b.Retry(ctx, func() error {
		err := e.Lead(ctx, f)
		if ctx.Err() != nil {
			return nil
		}
		if ended != nil {
			ended(err)
		}
		if err == nil {
			err = errTermEnded
		}
		return err
	})
}
