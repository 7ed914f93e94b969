package tailers

import (
	"context"
	"errors"
	"time"

	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/election"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ArchiveElection is the coord cluster's election of the region's one
// archiver.
const ArchiveElection = "/sys/audit/archive/leader"

// The archive election's TTL and the bound on each of its etcd calls.
const (
	archiveTTL       = 10 * time.Second
	archiveOpTimeout = 5 * time.Second
)

// Archiver is what the elected archiver runs: archive.Archive.
type Archiver interface {
	Prepare(ctx context.Context) error
	RunDaily(ctx context.Context, p archive.Progress) error
}

var _ Archiver = (*archive.Archive)(nil)

// runArchive runs the region's archiver while this process is elected,
// campaigning again when it is deposed, until ctx ends. The last day done
// is kept on the coord cluster (ArchiveProgress), written under the
// election, so a successor resumes after it. Two archivers overlapping for
// a moment (one deposed, not yet stopped) is harmless: a day exported
// again is the same bytes, and a record is put only if absent.
func runArchive(ctx context.Context, cfg Config) {
	el := election.Election{Coord: cfg.Coord, Prefix: ArchiveElection, Name: cfg.Name, TTL: archiveTTL, OpTimeout: archiveOpTimeout}
	el.Run(ctx, cfg.backoff(), func(lctx context.Context, leader clientv3.Cmp) error {
		cfg.Logger.Info("audit: archiving", "archiver", cfg.Name)
		// The buckets and their rules first, bounded per try: the daily
		// run writes nothing into a bucket without its rules.
		ok := cfg.backoff().Retry(lctx, func() error {
			bctx, cancel := context.WithTimeout(lctx, cfg.MigrateTimeout)
			defer cancel()
			err := cfg.Archive.Prepare(bctx)
			if err != nil && lctx.Err() == nil {
				cfg.Logger.Warn("audit: the archive's buckets are not ready; the lock service is unaffected, trying again", "err", err.Error())
			}
			return err
		})
		if !ok {
			return lctx.Err()
		}
		return cfg.Archive.RunDaily(lctx, etcdProgress{etcd: cfg.Coord, leader: leader, timeout: archiveOpTimeout})
	}, func(err error) {
		switch {
		case errors.Is(err, election.ErrDeposed):
			cfg.Logger.Warn("audit: archiver deposed; campaigning again", "archiver", cfg.Name)
		case err != nil:
			cfg.Logger.Warn("audit: archiver failed; campaigning again", "archiver", cfg.Name, "err", err.Error())
		default: // RunDaily returns only when lctx ended
			cfg.Logger.Warn("audit: archiver stopped; campaigning again", "archiver", cfg.Name)
		}
	})
}
