package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/lockplane/lockplane/test/gate/cluster"
	"github.com/lockplane/lockplane/test/procflags"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shard histories' shards: the map starts over the first and the
// second is added mid-run (by shard-add and shard-roll's faults, and by
// shard-wipe's heal).
const (
	shardFrom  = "s0"
	shardAdded = "s1"
)

// shards are a history's entity shards: one-member etcd process clusters
// beside the coord cluster, which holds the map.
type shards struct {
	clusters map[string]*cluster.Cluster
	etcd     map[string]*clientv3.Client
	cs       shardmap.Clusters
	// m is the map the history starts with.
	m    shardmap.Map
	done chan struct{}
	mu   sync.Mutex
	// addErr is the add's outcome; addedEpoch the added shard's epoch
	// once it is in the map.
	addErr     error
	addedEpoch uint32
}

// gateKeys are the keys of a history without shards.
func gateKeys(n int) []string {
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("gate/record/%d", i))
	}
	return keys
}

// startShards starts the shards, with no map yet (see init).
func startShards(ctx context.Context, cfg Config) (*shards, error) {
	sh := &shards{clusters: map[string]*cluster.Cluster{}, etcd: map[string]*clientv3.Client{}, done: make(chan struct{})}
	sh.cs = shardmap.Clusters{Shards: map[string]shardmap.Etcd{}}
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
		cli, err := c.Client()
		if err != nil {
			sh.close()
			return nil, err
		}
		sh.etcd[name] = cli
		sh.cs.Shards[name] = cli
	}
	return sh, nil
}

// init stores map version 1 over the shards inMap on the coord cluster.
func (sh *shards) init(ctx context.Context, coord *clientv3.Client, inMap []string) error {
	sh.cs.Coord = coord
	ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	m, err := shardmap.Init(ictx, sh.cs, inMap, nil)
	sh.m = m
	return err
}

// keys are n keys of ranges of their own, half of which move to the added
// shard: the history covers keys that move and keys that stay.
func (sh *shards) keys(n int) []string {
	var moving, staying []string
	for i := 0; len(moving)+len(staying) < n; i++ {
		key := fmt.Sprintf("gate/r%d/record", i)
		switch {
		case sh.adding().Moving(key) && len(moving) < (n+1)/2:
			moving = append(moving, key)
		case !sh.adding().Moving(key) && len(staying) < n/2:
			staying = append(staying, key)
		}
	}
	return append(moving, staying...)
}

// adding is the map while the second shard is being added.
func (sh *shards) adding() shardmap.Map {
	return shardmap.Map{Version: sh.m.Version + 1, Shards: sh.m.Shards, Adding: shardAdded}
}

// stays names the shard key stays on for the whole history; "" if the add
// moves it.
func (sh *shards) stays(key string) string {
	if sh.adding().Moving(key) {
		return ""
	}
	return sh.m.Home(key)
}

// names are every shard's name, in the map or to be added.
func (sh *shards) names() []string {
	if sh == nil {
		return nil
	}
	return []string{shardFrom, shardAdded}
}

// procShards route an arbiter's entity tier to the named shards.
func (sh *shards) procShards(names ...string) []procflags.Shard {
	var out []procflags.Shard
	for _, name := range names {
		out = append(out, procflags.Shard{Name: name, Endpoints: sh.clusters[name].Endpoints()})
	}
	return out
}

// add starts adding the second shard as operators do, through run (the
// two-person request and approval, history.twoPersonShardAdd), and returns
// what waits for it to finish.
func (sh *shards) add(ctx context.Context, run func(context.Context, string) error) func() {
	go func() {
		defer close(sh.done)
		err := run(ctx, shardAdded)
		var added uint32
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, found, rerr := epoch.Read(rctx, sh.etcd[shardAdded])
			cancel()
			if rerr != nil || !found {
				err = fmt.Errorf("read its epoch record: %v (found %t)", rerr, found)
			}
			added = st.Epoch
		}
		sh.mu.Lock()
		sh.addErr, sh.addedEpoch = err, added
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
	for _, c := range sh.etcd {
		c.Close()
	}
	for _, c := range sh.clusters {
		c.Close()
	}
}
