// Command core measures the lock core on one embedded 3-member etcd cluster,
// in one run, side by side:
//
//	(a) raw etcd: the arbiter's own grant Txn and release Txn, issued
//	    directly: the floor any etcd-based lock pays;
//	(b) Lockplane: Acquire + Release through the arbiter, over mTLS gRPC;
//	(c) etcd's concurrency.Mutex Lock/Unlock on a reused session;
//	(g) (a) plus two round trips to the arbiter over mTLS gRPC that touch
//	    no etcd (health checks): what (b) costs were the arbiter's own work
//	    free.
//
// Each client works on its own key (uncontended), at each concurrency level.
// It prints p50, p99 and ops/s per mode and the ratios b/a, b/c, g/a (the
// hop's price) and b/g (the arbiter's own work).
//
// With -shards N it also starts N entity shards (3 members each) and
// measures (f) Lockplane on an entity class, routed by the shard map to a
// shard, with the ratio f/b: the cost of routing.
//
// With -hot N it then measures a hot key: N contenders, each its own
// identity and session, taking turns on one key through (d) Lockplane and
// (e) concurrency.Mutex. Every op waits its turn, so ops/s is handoffs per
// second and 1000/ops/s the mean handoff in ms.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/latency"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type result struct {
	Mode    string  `json:"mode"`
	Clients int     `json:"clients"`
	Ops     int     `json:"ops"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	OpsSec  float64 `json:"ops_per_sec"`
}

// op is one acquire + release by client i; it returns its latency.
type op func(ctx context.Context) error

// setup prepares n clients of a mode and returns one op per client.
type setup func(ctx context.Context, n int) ([]op, func(), error)

type mode struct {
	name string
	s    setup
}

func main() {
	duration := flag.Duration("duration", 6*time.Second, "measuring time per mode and concurrency")
	rounds := flag.Int("rounds", 6, "the modes take turns this many times, so that machine noise hits them alike")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time before each measurement")
	levels := flag.String("clients", "1,32", "comma-separated concurrency levels")
	asJSON := flag.Bool("json", false, "print results as JSON")
	only := flag.String("modes", "a,b,c,g", "which modes to run (a: raw Txn, b: lockplane, c: concurrency.Mutex, g: a plus two round trips to the arbiter that touch no etcd)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	hot := flag.Int("hot", 0, "then measure a hot key with this many contenders (0: skip)")
	groupCommit := flag.Int("group-commit", 0, "the arbiter's grant and release Txns in flight per cluster (0: its default; -1: each request its own Txn)")
	shards := flag.Int("shards", 0, "also start this many entity shards (3 members each) and measure mode f: lockplane on an entity class, routed to a shard")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	dir, err := os.MkdirTemp("", "lockplane-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	fmt.Fprintln(os.Stderr, "starting an embedded 3-member etcd cluster and the arbiter...")
	// Open authorisation: the benchmark measures the lock path, not a policy.
	opts := devenv.Options{Dir: dir, Workers: *hot, AllowAnyWorkload: true, GroupCommit: *groupCommit}
	if *shards > 0 {
		opts.Classes = class.NewStatic(class.Class{Name: "entity", TTL: class.Default.TTL, Tier: class.TierEntity, Prefixes: []string{entityPrefix}})
		opts.ShardMembers = 3
		for i := range *shards {
			opts.Shards = append(opts.Shards, fmt.Sprintf("entity-%d", i))
		}
		if !strings.Contains(*only, "f") {
			*only += ",f"
		}
	}
	env, err := devenv.Start(ctx, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()

	modes := []mode{
		{"a raw etcd Txn", rawTxn(env, "bench/raw")},
		{"g raw Txn + 2 arbiter hops", withHops(env)},
		{"b lockplane", viaArbiter(env, false, "")},
		{"c concurrency.Mutex", mutex(env, false)},
		{"f lockplane entity shard", viaArbiter(env, false, "entity")},
	}
	var results []result
	for _, lv := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(lv))
		if err != nil || n < 1 {
			log.Fatalf("-clients: %q is not a positive number", lv)
		}
		var picked []mode
		for _, m := range modes {
			if strings.Contains(*only, m.name[:1]) && (m.name[:1] != "f" || *shards > 0) {
				picked = append(picked, m)
			}
		}
		fmt.Fprintf(os.Stderr, "measuring %d modes with %d clients, %s each in %d interleaved rounds...\n", len(picked), n, *duration, *rounds)
		rs, err := measure(ctx, picked, n, *warmup, *duration, *rounds)
		if err != nil {
			log.Fatal(err)
		}
		results = append(results, rs...)
	}
	var hotResults []result
	if *hot > 0 {
		fmt.Fprintf(os.Stderr, "measuring a hot key with %d contenders, %s per mode in %d interleaved rounds...\n", *hot, *duration, *rounds)
		hotResults, err = measure(ctx, []mode{{"d lockplane hot key", viaArbiter(env, true, "")}, {"e concurrency.Mutex hot key", mutex(env, true)}}, *hot, *warmup, *duration, *rounds)
		if err != nil {
			log.Fatal(err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(map[string]any{"results": results, "ratios": ratios(results), "hot_key": hotResults})
		return
	}
	defer printHot(hotResults)
	fmt.Printf("\n%-26s %7s %8s %9s %9s %9s\n", "mode", "clients", "ops", "p50 ms", "p99 ms", "ops/s")
	for _, r := range results {
		fmt.Printf("%-26s %7d %8d %9.3f %9.3f %9.0f\n", r.Mode, r.Clients, r.Ops, r.P50ms, r.P99ms, r.OpsSec)
	}
	fmt.Printf("\n%-8s %-8s %8s %8s %8s\n", "clients", "ratio", "p50", "p99", "ops/s")
	for _, q := range ratios(results) {
		fmt.Printf("%-8d %-8s %8.2f %8.2f %8.2f\n", q.Clients, q.Name, q.P50, q.P99, q.OpsSec)
	}
}

type ratio struct {
	Clients int     `json:"clients"`
	Name    string  `json:"ratio"`
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	OpsSec  float64 `json:"ops_per_sec"`
}

func ratios(rs []result) []ratio {
	by := map[string]result{}
	var levels []int
	for _, r := range rs {
		by[r.Mode[:1]+strconv.Itoa(r.Clients)] = r
		if !slices.Contains(levels, r.Clients) {
			levels = append(levels, r.Clients)
		}
	}
	var out []ratio
	for _, n := range levels {
		b, ok := by["b"+strconv.Itoa(n)]
		for _, other := range []string{"a", "c"} {
			o, ok2 := by[other+strconv.Itoa(n)]
			if !ok || !ok2 {
				continue
			}
			out = append(out, ratio{Clients: n, Name: "b/" + other, P50: b.P50ms / o.P50ms, P99: b.P99ms / o.P99ms, OpsSec: b.OpsSec / o.OpsSec})
		}
		// g is a plus the two mTLS round trips b makes: g/a is what the
		// hop alone costs, b/g what the arbiter's own work adds.
		if g, ok2 := by["g"+strconv.Itoa(n)]; ok2 {
			if a, ok3 := by["a"+strconv.Itoa(n)]; ok3 {
				out = append(out, ratio{Clients: n, Name: "g/a", P50: g.P50ms / a.P50ms, P99: g.P99ms / a.P99ms, OpsSec: g.OpsSec / a.OpsSec})
			}
			if ok {
				out = append(out, ratio{Clients: n, Name: "b/g", P50: b.P50ms / g.P50ms, P99: b.P99ms / g.P99ms, OpsSec: b.OpsSec / g.OpsSec})
			}
		}
		if f, ok2 := by["f"+strconv.Itoa(n)]; ok && ok2 {
			out = append(out, ratio{Clients: n, Name: "f/b", P50: f.P50ms / b.P50ms, P99: f.P99ms / b.P99ms, OpsSec: f.OpsSec / b.OpsSec})
		}
	}
	return out
}

// measure prepares every mode's clients, then lets the modes take turns
// for rounds rounds of d/rounds each and pools each mode's latencies.
func measure(ctx context.Context, modes []mode, n int, warmup, d time.Duration, rounds int) ([]result, error) {
	ops := make([][]op, len(modes))
	for i, m := range modes {
		o, done, err := m.s(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		defer done()
		ops[i] = o
		if _, err := run(ctx, o, warmup); err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	lat := make([][]time.Duration, len(modes))
	spent := make([]time.Duration, len(modes))
	for r := 0; r < rounds; r++ {
		for i, m := range modes {
			start := time.Now()
			l, err := run(ctx, ops[i], d/time.Duration(rounds))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			spent[i] += time.Since(start)
			lat[i] = append(lat[i], l...)
		}
	}
	var out []result
	for i, m := range modes {
		sum := latency.Summarize(lat[i])
		out = append(out, result{Mode: m.name, Clients: n, Ops: sum.N, P50ms: sum.P50ms, P99ms: sum.P99ms, OpsSec: float64(sum.N) / spent[i].Seconds()})
	}
	return out, nil
}

// run drives every op in its own goroutine for d and returns the latencies.
func run(ctx context.Context, ops []op, d time.Duration) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for _, o := range ops {
		wg.Add(1)
		go func(o op) {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := o(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(o)
	}
	wg.Wait()
	return lat, firstErr
}

// rawTxn issues the arbiter's grant and release transactions directly.
func rawTxn(env *devenv.Env, prefix string) setup {
	return func(ctx context.Context, n int) ([]op, func(), error) {
		var ops []op
		var leases []clientv3.LeaseID
		for i := 0; i < n; i++ {
			lease, err := env.Etcd.Grant(ctx, 15)
			if err != nil {
				return nil, nil, err
			}
			leases = append(leases, lease.ID)
			sessKey := lockkey.SessionKey(int64(lease.ID))
			sessVal := `{"identity":"spiffe://lockplane.dev/bench","ttl_seconds":15}`
			if _, err := env.Etcd.Put(ctx, sessKey, sessVal, clientv3.WithLease(lease.ID)); err != nil {
				return nil, nil, err
			}
			ep, err := env.Etcd.Get(ctx, lockkey.EpochKey)
			if err != nil || len(ep.Kvs) == 0 {
				return nil, nil, fmt.Errorf("no epoch record: %v", err)
			}
			epochRev := ep.Kvs[0].ModRevision
			holdKey := lockkey.HoldKey(fmt.Sprintf("%s/%d", prefix, i))
			hold := `{"identity":"spiffe://lockplane.dev/bench","session":1,"class":"default","since":"2026-01-01T00:00:00Z"}`
			id := lease.ID
			go keepAlive(env.Etcd, id)
			ops = append(ops, func(ctx context.Context) error {
				g, err := env.Etcd.Txn(ctx).If(
					clientv3.Compare(clientv3.CreateRevision(holdKey), "=", 0),
					clientv3.Compare(clientv3.ModRevision(lockkey.EpochKey), "=", epochRev),
					clientv3.Compare(clientv3.Value(sessKey), "=", sessVal),
				).Then(clientv3.OpPut(holdKey, hold, clientv3.WithLease(id))).
					Else(clientv3.OpGet(holdKey), clientv3.OpGet(sessKey), clientv3.OpGet(lockkey.EpochKey)).Commit()
				if err != nil {
					return err
				}
				if !g.Succeeded {
					return fmt.Errorf("raw grant refused")
				}
				_, err = env.Etcd.Txn(ctx).If(
					clientv3.Compare(clientv3.CreateRevision(holdKey), "=", g.Header.Revision),
					clientv3.Compare(clientv3.LeaseValue(holdKey), "=", id),
					clientv3.Compare(clientv3.ModRevision(lockkey.EpochKey), "=", epochRev),
				).Then(clientv3.OpDelete(holdKey)).Commit()
				return err
			})
		}
		return ops, func() {
			for _, l := range leases {
				env.Etcd.Revoke(context.Background(), l)
			}
		}, nil
	}
}

// withHops is rawTxn with a gRPC health check to the arbiter before the
// grant and after the release, each over the worker's own mTLS
// connection, as b's Acquire and Release are: b's cost were the arbiter's
// work free. The checks touch no etcd.
func withHops(env *devenv.Env) setup {
	raw := rawTxn(env, "bench/hops")
	return func(ctx context.Context, n int) ([]op, func(), error) {
		ops, done, err := raw(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		var clients []*lockclient.Client
		for i, inner := range ops {
			c, err := env.Client("demo")
			if err != nil {
				return nil, nil, err
			}
			clients = append(clients, c)
			health := healthpb.NewHealthClient(c.Conn())
			ops[i] = func(ctx context.Context) error {
				if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					return err
				}
				if err := inner(ctx); err != nil {
					return err
				}
				_, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
				return err
			}
		}
		return ops, func() {
			done()
			for _, c := range clients {
				c.Close(context.Background())
			}
		}, nil
	}
}

func keepAlive(c *clientv3.Client, id clientv3.LeaseID) {
	ch, err := c.KeepAlive(context.Background(), id)
	if err != nil {
		return
	}
	for range ch {
	}
}

// viaArbiter acquires and releases through the arbiter, one client and
// session per worker: each on its own key, or (hot) all on one key, each
// worker its own identity, waiting its turn.
func viaArbiter(env *devenv.Env, hot bool, cls string) setup {
	return func(ctx context.Context, n int) ([]op, func(), error) {
		var ops []op
		var clients []*lockclient.Client
		for i := 0; i < n; i++ {
			id, key := "demo", fmt.Sprintf("bench/lockplane/%d", i)
			if cls == "entity" {
				key = fmt.Sprintf("%slockplane/%d", entityPrefix, i) // the entity class's keys
			}
			if hot {
				id, key = fmt.Sprintf("worker-%d", i), "bench/hot"
			}
			c, err := env.Client(id)
			if err != nil {
				return nil, nil, err
			}
			clients = append(clients, c)
			s, err := c.Session(ctx, cls)
			if err != nil {
				return nil, nil, err
			}
			lock := s.TryLock
			if hot {
				lock = s.Lock
			}
			ops = append(ops, func(ctx context.Context) error {
				h, err := lock(ctx, key, func(*lockclient.Hold) {})
				if err != nil {
					return err
				}
				return h.Release(ctx)
			})
		}
		return ops, func() {
			for _, c := range clients {
				c.Close(context.Background())
			}
		}, nil
	}
}

// mutex uses etcd's own recipe, on a reused session per worker: each on
// its own key, or (hot) all on one.
func mutex(env *devenv.Env, hot bool) setup {
	return func(ctx context.Context, n int) ([]op, func(), error) {
		var ops []op
		var sessions []*concurrency.Session
		for i := 0; i < n; i++ {
			s, err := concurrency.NewSession(env.Etcd, concurrency.WithTTL(15))
			if err != nil {
				return nil, nil, err
			}
			sessions = append(sessions, s)
			key := fmt.Sprintf("/bench/mutex/%d", i)
			if hot {
				key = "/bench/mutex/hot"
			}
			m := concurrency.NewMutex(s, key)
			ops = append(ops, func(ctx context.Context) error {
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			})
		}
		return ops, func() {
			for _, s := range sessions {
				s.Close()
			}
		}, nil
	}
}

// printHot prints the hot-key modes with their mean handoff.
func printHot(rs []result) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\n%-28s %11s %8s %9s %9s %12s %12s\n", "hot key", "contenders", "ops", "p50 ms", "p99 ms", "handoffs/s", "handoff ms")
	for _, r := range rs {
		fmt.Printf("%-28s %11d %8d %9.3f %9.3f %12.0f %12.3f\n", r.Mode, r.Clients, r.Ops, r.P50ms, r.P99ms, r.OpsSec, 1000/r.OpsSec)
	}
	if len(rs) == 2 {
		fmt.Printf("handoff d/e: %.2f\n", rs[1].OpsSec/rs[0].OpsSec)
	}
}

// entityPrefix is the benchmark's entity class's keys: a key's tier comes
// from its prefix.
const entityPrefix = "bench-entity/"
