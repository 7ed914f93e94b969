package main

// The services under test, two ways: embedded in this process
// (services/devenv: verified, the default), or etcd and the arbiter as
// their own processes (-processes: bin/etcd and bin/arbiter), so that the
// arbiter's RSS and CPU are its own and each cluster's renewals are counted
// apart.

import (
	"context"
	"fmt"
	"github.com/lockplane/lockplane/services/resourcetest"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/childproc"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/policy/live"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/lockplane/lockplane/test/procflags"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type services interface {
	// profilePath is the profile the workers and the probe dial with.
	profilePath() string
	coord() *clientv3.Client
	shard() *clientv3.Client
	// arbiterPID is the process whose RSS and CPU are reported as the
	// arbiter's: this process when embedded (with etcd in it too).
	arbiterPID() int
	// etcdPIDs are the etcd processes; none when embedded.
	etcdPIDs() []int
	// renewed is etcd's lease renewal counter now, by cluster: "coord"
	// and the shard apart, or one "coord+shard" when embedded (one
	// registry for every cluster in the process).
	renewed(ctx context.Context) (map[string]float64, error)
	embedded() bool
	close()
}

// embeddedServices is services/devenv in this process.
type embeddedServices struct{ env *devenv.Env }

func startEmbedded(ctx context.Context, cfg config, dir, policies string) (services, error) {
	live, err := live.New(policies, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	env, err := devenv.Start(ctx, devenv.Options{Dir: dir, Authorizer: live, Classes: live, Quotas: live, Workers: cfg.Identities,
		Shards: []string{shard}, ShardMembers: 3, OpTimeout: cfg.OpTimeout})
	if err != nil {
		return nil, err
	}
	return embeddedServices{env}, nil
}

func (e embeddedServices) profilePath() string     { return e.env.ProfilePath }
func (e embeddedServices) coord() *clientv3.Client { return e.env.Etcd }
func (e embeddedServices) shard() *clientv3.Client { return e.env.ShardEtcd[shard] }
func (e embeddedServices) arbiterPID() int         { return os.Getpid() }
func (e embeddedServices) etcdPIDs() []int         { return nil }
func (e embeddedServices) embedded() bool          { return true }
func (e embeddedServices) close()                  { e.env.Close() }
func (e embeddedServices) renewed(context.Context) (map[string]float64, error) {
	n, err := renewedTotal(prometheus.DefaultGatherer)
	return map[string]float64{"coord+shard": n}, err
}

// processServices are bin/etcd clusters and a bin/arbiter process.
type processServices struct {
	profile      string
	coordEtcd    *etcdProcs
	shardEtcd    *etcdProcs
	arbiter      *childproc.Process
	scrapeBudget time.Duration
}

func startProcesses(ctx context.Context, cfg config, dir, policies string) (_ services, err error) {
	s := &processServices{scrapeBudget: cfg.OpTimeout}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	p, err := devenv.WriteTrustDomain(dir, cfg.Identities)
	if err != nil {
		return nil, err
	}
	if s.coordEtcd, err = startEtcd(ctx, cfg.EtcdBin, filepath.Join(dir, "etcd"), "coord", cfg.CoordMembers, time.Minute); err != nil {
		return nil, err
	}
	if s.shardEtcd, err = startEtcd(ctx, cfg.EtcdBin, filepath.Join(dir, "etcd"), shard, 3, time.Minute); err != nil {
		return nil, err
	}
	// The steps `lockplane up` takes before any arbiter: the region's
	// first epochs, then map version 1 naming the shard.
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := epoch.BootstrapRegion(bctx, s.coordEtcd.client, "coord", map[string]clientv3.KV{shard: s.shardEtcd.client}, 0); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if _, err := shardmap.Init(bctx, shardmap.Clusters{Coord: s.coordEtcd.client, Shards: map[string]shardmap.Etcd{shard: s.shardEtcd.client},
		OpTimeout: cfg.OpTimeout}, []string{shard}, nil); err != nil {
		return nil, fmt.Errorf("shard map: %w", err)
	}

	ports, err := resourcetest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	listen, metrics := ports[0], ports[1]
	abs := func(f string) string {
		if filepath.IsAbs(f) {
			return f
		}
		return filepath.Join(dir, f)
	}
	id := p.Identities["arbiter"]
	p.Endpoint = fmt.Sprintf("127.0.0.1:%d", listen)
	p.Metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)
	cmd := exec.Command(cfg.ArbiterBin, procflags.Arbiter{Listen: p.Endpoint, MetricsListen: fmt.Sprintf("127.0.0.1:%d", metrics),
		EtcdEndpoints: s.coordEtcd.clients, Shards: []procflags.Shard{{Name: shard, Endpoints: s.shardEtcd.clients}},
		SVIDCert: abs(id.Cert), SVIDKey: abs(id.Key), Bundle: abs(p.Bundle), TrustDomain: p.TrustDomain,
		Policies: policies, OpTimeout: cfg.OpTimeout,
		// The benchmark's clusters run without etcd users, as the gate's.
		EtcdWithoutAuth: true}.Args()...)
	logPath := filepath.Join(dir, "arbiter.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	s.arbiter, err = childproc.Start(cmd)
	log.Close() // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.ArbiterBin, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", p.Endpoint, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the arbiter did not listen on %s within 30s (log: %s)", p.Endpoint, logPath)
		}
	}
	s.profile = filepath.Join(dir, "profile.json")
	return s, p.Save(s.profile)
}

func (s *processServices) profilePath() string     { return s.profile }
func (s *processServices) coord() *clientv3.Client { return s.coordEtcd.client }
func (s *processServices) shard() *clientv3.Client { return s.shardEtcd.client }
func (s *processServices) arbiterPID() int         { return s.arbiter.Pid() }
func (s *processServices) etcdPIDs() []int {
	return append(s.coordEtcd.pids(), s.shardEtcd.pids()...)
}
func (s *processServices) embedded() bool { return false }

func (s *processServices) renewed(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	for _, c := range []*etcdProcs{s.coordEtcd, s.shardEtcd} {
		n, err := c.renewed(ctx, s.scrapeBudget)
		if err != nil {
			return nil, err
		}
		out[c.name] = n
	}
	return out, nil
}

func (s *processServices) close() {
	if s.arbiter != nil {
		s.arbiter.Kill()
	}
	for _, c := range []*etcdProcs{s.shardEtcd, s.coordEtcd} {
		if c != nil {
			c.close()
		}
	}
}
