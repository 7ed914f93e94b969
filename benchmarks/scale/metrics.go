package main

// What the driver reads from the processes and from etcd: RSS and CPU from
// /proc, the lease renewal counter from etcd's metrics, database sizes from
// each member's Status.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// clockTicks is USER_HZ, which is 100 on every Linux this runs on.
const clockTicks = 100

// rssBytes is a process's resident set (VmRSS) from /proc.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuTime is a process's user + system CPU time so far, from /proc.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; count from its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// renewedTotal is etcd's etcd_debugging_lease_renewed_total: lease
// renewals the leader's lessor applied, i.e. keepalives that reached etcd.
// Embedded etcd registers it in the default registry, so it sums every
// cluster in this process (coord and the entity shard).
func renewedTotal(g prometheus.Gatherer) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != "etcd_debugging_lease_renewed_total" {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum, nil
	}
	return 0, fmt.Errorf("etcd_debugging_lease_renewed_total not registered")
}

// dbSizes is each endpoint's database size (DbSize, and DbSizeInUse),
// each Status call bounded by timeout.
func dbSizes(ctx context.Context, c *clientv3.Client, timeout time.Duration) (size, inUse int64, err error) {
	for _, ep := range c.Endpoints() {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		st, err := c.Status(cctx, ep)
		cancel()
		if err != nil {
			return 0, 0, fmt.Errorf("status %s: %w", ep, err)
		}
		size, inUse = max(size, st.DbSize), max(inUse, st.DbSizeInUse)
	}
	return size, inUse, nil
}

// countHolds is how many keys etcd has under prefix, by a count-only
// read bounded by timeout.
func countHolds(ctx context.Context, c *clientv3.Client, prefix string, timeout time.Duration) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := c.Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting holds: %w", err)
	}
	return r.Count, nil
}
