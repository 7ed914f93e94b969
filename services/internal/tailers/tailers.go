// Package tailers runs an audit tailer per cluster, and the archiver.
//
// The arbiter binary and the embedded default both run it for every
// cluster they have a client of: one audit.Run per cluster, each campaigning again after a backoff when it is
// deposed or fails, until the process stops. Audit never takes the lock
// service down: a store that does not answer is logged and tried again.
package tailers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/election"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config is the tailers of one process.
type Config struct {
	// Coord is the coord cluster's name and client: it is tailed, and holds
	// every tailer's election and checkpoint. Shards are the entity shards'
	// clients by name, each tailed too.
	CoordName string
	Coord     *clientv3.Client
	Shards    map[string]*clientv3.Client
	Store     audit.Store
	// Migrate, when set, prepares the store before any tailer starts; it is
	// called, each call bounded by MigrateTimeout, until it succeeds.
	Migrate        func(context.Context) error
	MigrateTimeout time.Duration
	// Name identifies this process in the elections; Name() when empty.
	Name    string
	Metrics *audit.Metrics
	Logger  *slog.Logger
	// Archive, when set, is run by one process of the region at a time
	// (an election on the coord cluster): it copies the store's history
	// to MinIO every day.
	Archive Archiver
	// CheckpointEvery is passed to each tailer (audit.Config's default
	// when zero).
	CheckpointEvery time.Duration
	// Backoff is the first wait before campaigning again, doubling up to
	// MaxBackoff while runs keep failing at once (election.Backoff's Min
	// and Max); 1 s and 30 s when zero.
	Backoff, MaxBackoff time.Duration
}

// Name is this process's name in the tailers' elections: its host name
// and pid.
func Name() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// Run prepares the store and runs one tailer per cluster, and the archive
// when there is one, until ctx ends.
func Run(ctx context.Context, cfg Config) {
	cfg.defaults()
	if cfg.Migrate != nil && !migrate(ctx, cfg) {
		return
	}
	clusters := map[string]*clientv3.Client{cfg.CoordName: cfg.Coord}
	for name, cl := range cfg.Shards {
		clusters[name] = cl
	}
	var wg sync.WaitGroup
	if cfg.Archive != nil {
		wg.Go(func() { runArchive(ctx, cfg) })
	}
	for name, cl := range clusters {
		tc := audit.Config{Cluster: name, Etcd: cl, Coord: cfg.Coord, Store: cfg.Store, Name: cfg.Name, Metrics: cfg.Metrics, Logger: cfg.Logger,
			CheckpointEvery: cfg.CheckpointEvery}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tail(ctx, cfg, tc)
		}()
	}
	wg.Wait()
}

func (c *Config) defaults() {
	if c.Name == "" {
		c.Name = Name()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MigrateTimeout == 0 {
		c.MigrateTimeout = 30 * time.Second
	}
	if c.Backoff == 0 {
		c.Backoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
}

// backoff is the wait between the tailers' tries and terms.
func (c Config) backoff() election.Backoff {
	return election.Backoff{Min: c.Backoff, Max: c.MaxBackoff}
}

// migrate calls cfg.Migrate until it succeeds (true) or ctx ends (false).
func migrate(ctx context.Context, cfg Config) bool {
	return cfg.backoff().Retry(ctx, func() error {
		mctx, cancel := context.WithTimeout(ctx, cfg.MigrateTimeout)
		defer cancel()
		err := cfg.Migrate(mctx)
		if err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("audit: the store's migration failed; the lock service is unaffected, trying again", "err", err.Error())
		}
		return err
	})
}

// tail runs one cluster's tailer again and again until ctx ends. audit.Run
// holds one term; the backoff between terms is the election package's.
func tail(ctx context.Context, cfg Config, tc audit.Config) {
	cfg.backoff().Retry(ctx, func() error {
		err := audit.Run(ctx, tc)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, election.ErrDeposed):
			cfg.Logger.Warn("audit: deposed; campaigning again", "cluster", tc.Cluster, "tailer", tc.Name)
		case err != nil:
			cfg.Logger.Warn("audit: tailer failed; campaigning again", "cluster", tc.Cluster, "tailer", tc.Name, "err", err.Error())
		}
		return err // nil only when ctx ended
	})
}
