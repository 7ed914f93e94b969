package tailers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/audit/archive"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ArchiveProgress is the coord cluster's record of the last day the
// region's archiver finished (a date, YYYY-MM-DD).
const ArchiveProgress = "/sys/audit/archive/progress"

// etcdProgress keeps archive.Progress on the coord cluster. Done writes
// only while leader holds: a deposed archiver cannot move it.
type etcdProgress struct {
	etcd    *clientv3.Client
	leader  clientv3.Cmp
	timeout time.Duration
}

var _ archive.Progress = etcdProgress{}

func (p etcdProgress) Last(ctx context.Context) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.etcd.Get(ctx, ArchiveProgress)
	if err != nil || len(resp.Kvs) == 0 {
		return time.Time{}, false, err
	}
	day, err := time.Parse(time.DateOnly, string(resp.Kvs[0].Value))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s holds %q, not a date: %w", ArchiveProgress, resp.Kvs[0].Value, err)
	}
	return day, true, nil
}

func (p etcdProgress) Done(ctx context.Context, day time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.etcd.Txn(ctx).If(p.leader).Then(clientv3.OpPut(ArchiveProgress, day.UTC().Format(time.DateOnly))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errors.New("archive: no longer the elected archiver; the progress stays where the leader puts it")
	}
	return nil
}
