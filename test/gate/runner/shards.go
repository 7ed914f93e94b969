package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/lockclient"
	"github.com/lockplane/lockplane/services/profile"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/lockplane/lockplane/test/gate/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The shard-add history's shards: the map starts over the first and the
// second is added mid-run.
const (
	shardFrom  = "s0"
	shardAdded = "s1"
)

// shards are a history's entity shards: one-member etcd process clusters
// beside the coord cluster, which holds the map.
type shards struct {
	clusters map[string]*cluster.Cluster
	clients  []*clientv3.Client
	cs       shardmap.Clusters
	done     chan struct{}
	mu       sync.Mutex
	addErr   error
}

// gateKeys are the keys of a history without shards.
func gateKeys(n int) []string {
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("gate/record/%d", i))
	}
	return keys
}

// startShards starts the shards and stores map version 1 over the first.
func startShards(ctx context.Context, cfg Config, coord *cluster.Cluster) (*shards, error) {
	sh := &shards{clusters: map[string]*cluster.Cluster{}, done: make(chan struct{})}
	coordCli, err := sh.client(coord)
	if err != nil {
		return nil, err
	}
	sh.cs = shardmap.Clusters{Coord: coordCli, Shards: map[string]shardmap.Etcd{}}
	for _, name := range []string{shardFrom, shardAdded} {
		c, err := cluster.Start(ctx, cluster.Config{Bin: cfg.Etcd, Dir: filepath.Join(cfg.Dir, "shard-"+name), Members: 1})
		if err != nil {
			// A port picked free can be taken before etcd binds it; once
			// more on fresh ports before giving the history up.
			c, err = cluster.Start(ctx, cluster.Config{Bin: cfg.Etcd, Dir: filepath.Join(cfg.Dir, "shard-"+name+"-again"), Members: 1})
		}
		if err != nil {
			sh.close()
			return nil, fmt.Errorf("shard %s: %w", name, err)
		}
		sh.clusters[name] = c
		cli, err := sh.client(c)
		if err != nil {
			sh.close()
			return nil, err
		}
		sh.cs.Shards[name] = cli
	}
	ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := shardmap.Init(ictx, sh.cs, []string{shardFrom}, nil); err != nil {
		sh.close()
		return nil, err
	}
	return sh, nil
}

func (sh *shards) client(c *cluster.Cluster) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		sh.clients = append(sh.clients, cli)
	}
	return cli, err
}

// keys are n keys of ranges of their own, half of which move to the added
// shard: the history covers keys that move and keys that stay.
func (sh *shards) keys(n int) []string {
	adding := shardmap.Map{Version: 2, Shards: []string{shardFrom}, Adding: shardAdded}
	var moving, staying []string
	for i := 0; len(moving)+len(staying) < n; i++ {
		key := fmt.Sprintf("gate/r%d/record", i)
		switch {
		case adding.Moving(key) && len(moving) < (n+1)/2:
			moving = append(moving, key)
		case !adding.Moving(key) && len(staying) < n/2:
			staying = append(staying, key)
		}
	}
	return append(moving, staying...)
}

// flags route the arbiters' entity tier to both shards.
func (sh *shards) flags() []string {
	var out []string
	for _, name := range []string{shardFrom, shardAdded} {
		out = append(out, "--shard", name+"="+strings.Join(sh.clusters[name].Endpoints(), ","))
	}
	return out
}

// add starts adding the second shard through an arbiter's AddShard, as an
// operator does, and returns what waits for it to finish.
func (sh *shards) add(ctx context.Context, profilePath string) func() {
	go func() {
		defer close(sh.done)
		err := func() error {
			p, err := profile.Load(profilePath)
			if err != nil {
				return err
			}
			c, err := lockclient.DialProfile(p, "operator")
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			actx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			stream, err := adminv1.NewAdminServiceClient(c.Conn()).AddShard(actx, &adminv1.AddShardRequest{Shard: shardAdded})
			if err != nil {
				return err
			}
			for {
				if _, err := stream.Recv(); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
			}
		}()
		sh.mu.Lock()
		sh.addErr = err
		sh.mu.Unlock()
	}()
	return func() {
		select {
		case <-sh.done:
		case <-ctx.Done():
		}
	}
}

// err is the add's outcome: a history whose add failed checks nothing about
// a move.
func (sh *shards) err() error {
	select {
	case <-sh.done:
	default:
		return fmt.Errorf("shard-add: adding shard %s did not finish within the history", shardAdded)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.addErr != nil {
		return fmt.Errorf("shard-add: adding shard %s: %w", shardAdded, sh.addErr)
	}
	return nil
}

func (sh *shards) close() {
	for _, c := range sh.clients {
		c.Close()
	}
	for _, c := range sh.clusters {
		c.Close()
	}
}
