// Package cluster runs an etcd cluster as separate OS processes (the etcd
// binary built from this module), with every member's client and peer
// traffic through a fault proxy, and injects the faults of the release
// gate: kills, pauses, isolation, partitions and peer-link delay.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockplane/lockplane/services/resourcetest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/dr/restore"
	"github.com/lockplane/lockplane/services/childproc"
	"github.com/lockplane/lockplane/test/gate/faultproxy"
	"github.com/lockplane/lockplane/test/procflags"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config shapes a cluster.
type Config struct {
	// Bin is the etcd binary.
	Bin string
	// Dir receives each member's data directory and log.
	Dir string
	// Members is the member count; 3 when zero.
	Members int
}

// Member is one etcd process and its proxies.
type Member struct {
	Name string
	// ID is the member ID in hex, as etcd's peer traffic names it.
	ID string
	// Client is the member's client URL, and Peer its advertised peer
	// URL, both through its proxies.
	Client, Peer string

	args        []string
	ports       [2]int             // client, peer: where etcd itself listens
	proc        *childproc.Process // nil until first started
	clientProxy *faultproxy.Proxy
	peerProxy   *faultproxy.Proxy
}

// Cluster is a running process cluster.
type Cluster struct {
	cfg     Config
	mu      sync.Mutex
	Members []*Member
	initial []string // --initial-cluster entries
	token   string   // the running cluster's --initial-cluster-token
}

// Token is the --initial-cluster-token the cluster was formed or last
// restored with.
func (c *Cluster) Token() string { return c.token }

// Start creates the proxies, starts every member and waits until the
// cluster has a leader.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	var initial []string
	free, err := resourcetest.FreePorts(2 * cfg.Members)
	if err != nil {
		return nil, err
	}
	ports := make([][2]int, cfg.Members)
	for i := 0; i < cfg.Members; i++ {
		ports[i] = [2]int{free[2*i], free[2*i+1]}
		m := &Member{Name: fmt.Sprintf("m%d", i+1)}
		if m.clientProxy, err = faultproxy.New("127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", ports[i][0])); err != nil {
			return nil, err
		}
		if m.peerProxy, err = faultproxy.New("127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", ports[i][1])); err != nil {
			return nil, err
		}
		m.Client, m.Peer = "http://"+m.clientProxy.Addr(), "http://"+m.peerProxy.Addr()
		initial = append(initial, fmt.Sprintf("%s=http://%s", m.Name, m.peerProxy.Addr()))
		c.Members = append(c.Members, m)
	}
	for i, m := range c.Members {
		m.ports = ports[i]
		c.initial = append(c.initial, initial[i])
	}
	if err := c.form(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// form starts every member as a new cluster (a new token, so a new cluster
// ID), waits for a leader and learns the members' IDs.
func (c *Cluster) form(ctx context.Context) error {
	return c.start(ctx, fmt.Sprintf("gate-%d", time.Now().UnixNano()))
}

// start starts every member under token (a member whose data directory
// a restore wrote ignores the initial-cluster flags), waits for a leader
// and learns the members' IDs.
func (c *Cluster) start(ctx context.Context, token string) error {
	c.token = token
	for _, m := range c.Members {
		m.args = procflags.Etcd{
			Name: m.Name, DataDir: filepath.Join(c.cfg.Dir, m.Name),
			ListenClient: fmt.Sprintf("http://127.0.0.1:%d", m.ports[0]), AdvertiseClient: m.Client,
			ListenPeer: fmt.Sprintf("http://127.0.0.1:%d", m.ports[1]), AdvertisePeer: m.Peer,
			InitialCluster: c.initial, Token: token, State: "new", FeatureGates: procflags.LeaseCheckpoints,
			LogLevel: "warn", LogOutputs: filepath.Join(c.cfg.Dir, m.Name+".log"),
		}.Args()
		if err := c.startProcess(m); err != nil {
			return err
		}
	}
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return err
	}
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(mctx)
	if err != nil {
		return err
	}
	for _, mm := range ml.Members {
		for _, m := range c.Members {
			if mm.Name == m.Name {
				m.ID = fmt.Sprintf("%x", mm.ID)
			}
		}
	}
	return nil
}

// Wipe stops every member, removes their data and starts them again as a
// new, empty cluster with a new cluster ID on the same endpoints: a cluster
// rebuilt behind its clients' backs. Network faults are lifted (they name
// the old member IDs). down, when set, is called once every member is
// stopped: from then on the old cluster serves nothing.
func (c *Cluster) Wipe(ctx context.Context, down func()) error {
	c.stopAll(down)
	for _, m := range c.Members {
		if err := os.RemoveAll(filepath.Join(c.cfg.Dir, m.Name)); err != nil {
			return err
		}
	}
	c.Heal()
	return c.form(ctx)
}

// Restore stops every member, removes their data and starts them again
// from the snapshot at path, as a new cluster (a new token, so a new
// cluster ID) on the same endpoints: a disaster recovery done behind the
// clients' backs. Network faults are lifted. down is as Wipe's.
func (c *Cluster) Restore(ctx context.Context, path string, down func()) error {
	return c.RestoreBumped(ctx, path, down, 0)
}

// RestoreBumped is Restore with the restored revisions starting bump
// above the snapshot's, those below marked compacted (restore.Cluster's
// RevisionBump), as a shard restored in place is.
func (c *Cluster) RestoreBumped(ctx context.Context, path string, down func(), bump uint64) error {
	token := fmt.Sprintf("gate-restored-%d", time.Now().UnixNano())
	rc := restore.Cluster{Snapshot: path, Token: token, RevisionBump: bump}
	c.stopAll(down)
	for _, m := range c.Members {
		dir := filepath.Join(c.cfg.Dir, m.Name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		rc.Members = append(rc.Members, restore.Member{Name: m.Name, DataDir: dir, PeerURL: m.Peer})
	}
	c.Heal()
	if err := rc.All(); err != nil {
		return err
	}
	return c.start(ctx, token)
}

// stopAll kills every member, then calls down if set.
func (c *Cluster) stopAll(down func()) {
	for i := range c.Members {
		c.Kill(i)
	}
	if down != nil {
		down()
	}
}

func (c *Cluster) startProcess(m *Member) error {
	cmd := exec.Command(c.cfg.Bin, m.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// SurviveParent: as the members always ran; Close kills them.
	p, err := childproc.Start(cmd, childproc.SurviveParent())
	if err != nil {
		return fmt.Errorf("start %s: %w", m.Name, err)
	}
	m.proc = p
	return nil
}

// Client returns a client of every member, through the proxies.
func (c *Cluster) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// Endpoints are the members' client URLs, through their proxies.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Client)
	}
	return eps
}

// WaitHealthy polls until every running member reports the same leader.
func (c *Cluster) WaitHealthy(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		if _, err := c.leaderID(ctx); err == nil {
			return nil
		} else {
			last = err
		}
		if !c.anyRunning() {
			// Every process exited (a port taken before it bound, say):
			// waiting longer cannot help.
			return fmt.Errorf("cluster not healthy: every member exited (see %s/*.log)", c.cfg.Dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not healthy within %s: %v", within, last)
}

func (c *Cluster) anyRunning() bool {
	for _, m := range c.Members {
		if m.running() {
			return true
		}
	}
	return false
}

// Leader is the index of the member every running, reachable member
// agrees leads.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	leader, err := c.leaderID(ctx)
	if err != nil {
		return -1, err
	}
	for i, m := range c.Members {
		if m.ID == fmt.Sprintf("%x", leader) {
			return i, nil
		}
	}
	return -1, errors.New("leader is not a known member")
}

// leaderID is the leader every running member reports.
func (c *Cluster) leaderID(ctx context.Context) (uint64, error) {
	cli, err := c.Client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	var leader uint64
	for _, m := range c.Members {
		if !m.running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.Client)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", m.Name, err)
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return 0, errors.New("members disagree on the leader")
		}
		leader = st.Leader
	}
	if leader == 0 {
		return 0, errors.New("no member is running")
	}
	// Followers name a killed leader until their election timeout passes.
	for _, m := range c.Members {
		if m.ID == fmt.Sprintf("%x", leader) && !m.running() {
			return 0, fmt.Errorf("the members still follow %s, which is down", m.Name)
		}
	}
	return leader, nil
}

// StatusOf asks member i alone who it thinks leads (its ID in hex, "" for
// none).
func (c *Cluster) StatusOf(ctx context.Context, i int) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[i].Client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cli.Status(sctx, c.Members[i].Client)
	if err != nil {
		return "", err
	}
	if st.Leader == 0 {
		return "", nil
	}
	return fmt.Sprintf("%x", st.Leader), nil
}

func (m *Member) running() bool { return m.proc != nil && m.proc.ProcessState() == nil }

// Kill sends SIGKILL to member i and waits for it to die.
func (c *Cluster) Kill(i int) {
	m := c.Members[i]
	if m.running() {
		m.proc.Kill()
	}
}

// Restart starts a killed member again on its data.
func (c *Cluster) Restart(i int) error {
	m := c.Members[i]
	if m.running() {
		return fmt.Errorf("%s is running", m.Name)
	}
	return c.startProcess(m)
}

// Pause and Resume freeze and thaw member i (SIGSTOP, SIGCONT).
func (c *Cluster) Pause(i int) error  { return c.Members[i].proc.Signal(syscall.SIGSTOP) }
func (c *Cluster) Resume(i int) error { return c.Members[i].proc.Signal(syscall.SIGCONT) }

// Partition cuts the peer links between groups: a member hears only the
// members of its own group. Client traffic is untouched.
func (c *Cluster) Partition(groups ...[]int) {
	group := map[int]int{}
	for g, ms := range groups {
		for _, i := range ms {
			group[i] = g
		}
	}
	for i, to := range c.Members {
		for j, from := range c.Members {
			if i != j && group[i] != group[j] {
				to.peerProxy.Set(from.ID, faultproxy.Fault{Blackhole: true})
			}
		}
	}
}

// Isolate cuts member i off from its peers.
func (c *Cluster) Isolate(i int) {
	var rest []int
	for j := range c.Members {
		if j != i {
			rest = append(rest, j)
		}
	}
	c.Partition([]int{i}, rest)
}

// DelayPeers delays every peer link by d.
func (c *Cluster) DelayPeers(d time.Duration) {
	for _, m := range c.Members {
		m.peerProxy.Set(faultproxy.Any, faultproxy.Fault{Delay: d})
	}
}

// Heal lifts every network fault.
func (c *Cluster) Heal() {
	for _, m := range c.Members {
		m.peerProxy.Heal()
		m.clientProxy.Heal()
	}
}

// Close kills every member and stops the proxies.
func (c *Cluster) Close() {
	for i, m := range c.Members {
		c.Kill(i)
		if m.clientProxy != nil {
			m.clientProxy.Close()
		}
		if m.peerProxy != nil {
			m.peerProxy.Close()
		}
	}
}

// BuildEtcd builds this module's etcd into dir and returns its path: what
// a test of process clusters runs (Config.Bin).
func BuildEtcd(dir string) (string, error) {
	bin := filepath.Join(dir, "etcd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lockplane/lockplane/services/cmd/etcd").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build etcd: %v\n%s", err, out)
	}
	return bin, nil
}
