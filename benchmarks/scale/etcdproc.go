package main

// etcd clusters as bin/etcd processes on loopback, with no proxy in the
// path (unlike test/gate/cluster, whose fault proxies would add their own
// copying to every request and sit in this process), so each member's RSS,
// CPU and /metrics are its own.

import (
	"context"
	"fmt"
	"github.com/lockplane/lockplane/services/resourcetest"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/childproc"
	"github.com/lockplane/lockplane/test/procflags"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdProcs is one running cluster.
type etcdProcs struct {
	name    string
	procs   []*childproc.Process
	clients []string // client URLs, one per member
	client  *clientv3.Client
}

// startEtcd starts members members of a new cluster called name under dir,
// with the flags etcdembed gives the embedded default (lease checkpoints,
// periodic compaction), and returns once every member answers Status.
func startEtcd(ctx context.Context, bin, dir, name string, members int, timeout time.Duration) (_ *etcdProcs, err error) {
	c := &etcdProcs{name: name}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	free, err := resourcetest.FreePorts(2 * members)
	if err != nil {
		return nil, err
	}
	ports := make([][2]int, members)
	var initial []string
	for i := range ports {
		ports[i] = [2]int{free[2*i], free[2*i+1]}
		initial = append(initial, fmt.Sprintf("%s-%d=http://127.0.0.1:%d", name, i, ports[i][1]))
	}
	// One token for the whole cluster: members with different tokens
	// refuse each other.
	token := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	for i, p := range ports {
		m := fmt.Sprintf("%s-%d", name, i)
		client := fmt.Sprintf("http://127.0.0.1:%d", p[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", p[1])
		cmd := exec.Command(bin, procflags.Etcd{Name: m, DataDir: filepath.Join(dir, m),
			ListenClient: client, AdvertiseClient: client, ListenPeer: peer, AdvertisePeer: peer,
			InitialCluster: initial, Token: token, State: "new", FeatureGates: procflags.LeaseCheckpoints,
			AutoCompactionMode: "periodic", AutoCompactionRetention: "1h",
			LogLevel: "warn", LogOutputs: filepath.Join(dir, m+".log")}.Args()...)
		proc, err := childproc.Start(cmd)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", m, err)
		}
		c.procs = append(c.procs, proc)
		c.clients = append(c.clients, client)
	}
	if c.client, err = clientv3.New(clientv3.Config{Endpoints: c.clients, DialTimeout: timeout}); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		if _, _, err = dbSizes(ctx, c.client, time.Second); err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("etcd cluster %s not ready within %s: %w", name, timeout, err)
		}
	}
}

func (c *etcdProcs) pids() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.Pid())
	}
	return out
}

// renewed sums etcd_debugging_lease_renewed_total over the members'
// /metrics: only the leader's lessor renews (a follower forwards), so the
// sum is the cluster's renewals, across a leader change too.
func (c *etcdProcs) renewed(ctx context.Context, timeout time.Duration) (float64, error) {
	var sum float64
	for _, u := range c.clients {
		n, err := scrapeCounter(ctx, u+"/metrics", "etcd_debugging_lease_renewed_total", timeout)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.name, err)
		}
		sum += n
	}
	return sum, nil
}

func (c *etcdProcs) close() {
	if c.client != nil {
		c.client.Close()
	}
	for _, p := range c.procs {
		p.Kill()
	}
}

// scrapeCounter reads one counter (summed over its series) from a
// Prometheus text endpoint, within timeout.
func scrapeCounter(ctx context.Context, url, name string, timeout time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	mf, ok := mfs[name]
	if !ok {
		return 0, fmt.Errorf("%s: no %s", url, name)
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum, nil
}

// exists says whether path is a file, for the flags naming binaries.
func exists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
