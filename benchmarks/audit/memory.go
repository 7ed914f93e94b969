package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/devenv"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type memResult struct {
	Store       string  `json:"store"`
	Variant     string  `json:"variant"`
	Events      int     `json:"events"`
	Seconds     float64 `json:"seconds"`
	EventsSec   float64 `json:"events_per_sec"`
	HeldPeak    int64   `json:"held_peak_events"`
	HeapPeakMiB float64 `json:"heap_peak_mib"`
}

// memory writes a backlog of n events and reads it into ClickHouse with
// the read-ahead unbounded, then bounded (the default), each from
// revision 1 under a cluster name of its own (its own election and
// checkpoint) into a database of its own: first as fast as ClickHouse
// takes it, then with every insert slowed by perEvent for each event it
// carries (a store slower than etcd serves the backlog: a remote or busy
// ClickHouse), when perEvent is not zero. Each tailer runs in a child
// process of its own (this binary, -tail-child), so its heap is the
// tailer's alone, not the embedded etcd's.
func memory(ctx context.Context, env *devenv.Env, ch *chserver.Server, n int, perEvent time.Duration) []memResult {
	head := writeBacklog(ctx, env.Etcd, n)
	var out []memResult
	slows := []time.Duration{0}
	if perEvent > 0 {
		slows = append(slows, perEvent)
	}
	i := 0
	for _, slow := range slows {
		for _, v := range []struct {
			name  string
			limit int64
		}{{"unbounded", -1}, {"bounded", 0}} {
			job := childJob{Endpoints: env.Cluster.Endpoints(), ClickHouse: ch.URL(), Database: fmt.Sprintf("bench_mem%d", i),
				Cluster: fmt.Sprintf("coord-mem%d", i), Variant: v.name, Limit: v.limit, Slow: slow, Head: head}
			job.User, job.Password = ch.Writer()
			i++
			b, _ := json.Marshal(job)
			// The job on stdin, not the command line: it carries a password.
			cmd := exec.CommandContext(ctx, os.Args[0], "-tail-child")
			cmd.Stdin, cmd.Stderr = bytes.NewReader(b), os.Stderr
			res, err := cmd.Output()
			if err != nil {
				log.Fatalf("tailer child %s: %v", v.name, err)
			}
			var r memResult
			if err := json.Unmarshal(res, &r); err != nil {
				log.Fatalf("tailer child %s: %v: %s", v.name, err, res)
			}
			out = append(out, r)
		}
	}
	return out
}

// childJob is one catch-up for a child process to run.
type childJob struct {
	Endpoints            []string
	ClickHouse, Database string
	User, Password       string
	Cluster, Variant     string
	Limit                int64
	Slow                 time.Duration
	Head                 int64 // done once the store has this revision
}

// tailChild runs one catch-up (a childJob in JSON on in) and prints its
// memResult as JSON.
func tailChild(in io.Reader) {
	var job childJob
	if err := json.NewDecoder(in).Decode(&job); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: job.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	store := &timedStore{Store: chstore.New(job.ClickHouse, job.Database, chstore.WithCredentials(job.User, job.Password)), at: map[int64]time.Time{}, slow: job.Slow}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	m := audit.NewMetrics(nil)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stopSampling := sample(&peak)
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		err := audit.Run(tctx, audit.Config{Cluster: job.Cluster, Etcd: cli, Store: store, Name: "bench",
			Metrics: m, MaxPendingEvents: job.Limit})
		if err != nil {
			log.Fatal(err)
		}
	}()
	store.await(job.Head)
	secs := time.Since(start).Seconds()
	cancel()
	<-done
	stopSampling()
	storeName := "clickhouse"
	if job.Slow > 0 {
		storeName = fmt.Sprintf("+%s/event", job.Slow)
	}
	json.NewEncoder(os.Stdout).Encode(memResult{Store: storeName, Variant: job.Variant, Events: store.count(), Seconds: secs,
		EventsSec: float64(store.count()) / secs, HeldPeak: m.PendingPeak(job.Cluster),
		HeapPeakMiB: (float64(peak.Load()) - float64(before.HeapInuse)) / (1 << 20)})
}

// sample records the highest HeapInuse every 10 ms until stop.
func sample(peak *atomic.Uint64) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(quit); <-done }
}

// writeBacklog writes n events as Txns of 4 holds put, then the same 4
// deleted, and returns the last revision.
func writeBacklog(ctx context.Context, cli *clientv3.Client, n int) int64 {
	const perTxn, workers = 4, 16
	value := `{"identity":"spiffe://bench/ns/backlog/sa/worker","instance":"backlog-pod-1","session":1,"class":"default","since":"2026-12-03T00:00:00Z"}`
	pairs := (n + 2*perTxn - 1) / (2 * perTxn)
	var last atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := w; p < pairs; p += workers {
				var puts, dels []clientv3.Op
				for k := range perTxn {
					key := fmt.Sprintf("/l/team-a/backlog-%d/%d", p, k)
					puts = append(puts, clientv3.OpPut(key, value))
					dels = append(dels, clientv3.OpDelete(key))
				}
				for _, ops := range [][]clientv3.Op{puts, dels} {
					octx, cancel := context.WithTimeout(ctx, 10*time.Second)
					resp, err := cli.Txn(octx).Then(ops...).Commit()
					cancel()
					if err != nil {
						log.Fatal(err)
					}
					for {
						l := last.Load()
						if resp.Header.Revision <= l || last.CompareAndSwap(l, resp.Header.Revision) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	return last.Load()
}
