package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/prometheus/client_golang/prometheus"
)

// The policy the benchmark writes passes the same validation the arbiter
// applies, and its quotas cover every identity's share.
func TestPolicyLoads(t *testing.T) {
	dir := t.TempDir()
	ids := []string{"spiffe://lockplane.dev/ns/team-a/sa/demo", "spiffe://lockplane.dev/ns/bench/sa/worker-0", "spiffe://lockplane.dev/ns/bench/sa/worker-1"}
	if err := writePolicy(dir, 30*time.Second, ids, 40000, 250000); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, ok := set.Classes[className]
	if !ok || c.TTL != 30*time.Second || c.Tier != class.TierEntity {
		t.Fatalf("class %s: %+v", className, c)
	}
	q := set.Quotas()
	for _, id := range ids {
		if q[id].Sessions < 40000/len(ids) || q[id].Holds < 250000/len(ids) {
			t.Errorf("%s: quota %+v below its share", id, q[id])
		}
	}
}

// Below the advisory floor the set is refused: -ttl says so at start,
// not halfway through a run.
func TestPolicyRefusesShortTTL(t *testing.T) {
	dir := t.TempDir()
	if err := writePolicy(dir, 15*time.Second, []string{"spiffe://lockplane.dev/x"}, 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(dir, time.Now()); err == nil || !strings.Contains(err.Error(), "advisory floor") {
		t.Fatalf("a 15s advisory class: %v", err)
	}
}

func TestShare(t *testing.T) {
	for _, c := range []struct{ total, n int }{{300, 2}, {250000, 3}, {7, 4}, {1, 2}} {
		sum := 0
		for i := range c.n {
			s := share(c.total, c.n, i)
			if s < c.total/c.n || s > c.total/c.n+1 {
				t.Errorf("share(%d, %d, %d) = %d", c.total, c.n, i, s)
			}
			sum += s
		}
		if sum != c.total {
			t.Errorf("shares of %d over %d sum to %d", c.total, c.n, sum)
		}
	}
}

func TestProcReaders(t *testing.T) {
	rss, err := rssBytes(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("rss %d, %v", rss, err)
	}
	if _, err := cpuTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := rssBytes(-1); err == nil {
		t.Fatal("rss of no process")
	}
}

func TestRenewedTotal(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := renewedTotal(reg); err == nil {
		t.Fatal("no counter registered, no error")
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "lease", Name: "renewed_total"})
	reg.MustRegister(c)
	c.Add(7)
	if n, err := renewedTotal(reg); err != nil || n != 7 {
		t.Fatalf("%v, %v", n, err)
	}
}

func TestReportTable(t *testing.T) {
	var b bytes.Buffer
	(&report{Sessions: 3, Holds: 9, HoldsInEtcd: 9, ServicesInOneProcess: true}).writeTable(&b)
	for _, want := range []string{"false expiries", "keepalives reaching etcd", "arbiter+etcd", "9 of 9 holds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// scrapeCounter reads an etcd member's /metrics as etcd serves it: text,
// the counter possibly among others, summed over its series.
func TestScrapeCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# HELP etcd_debugging_lease_granted_total x\n# TYPE etcd_debugging_lease_granted_total counter\netcd_debugging_lease_granted_total 3\n"+
			"# HELP etcd_debugging_lease_renewed_total x\n# TYPE etcd_debugging_lease_renewed_total counter\netcd_debugging_lease_renewed_total 1805\n")
	}))
	defer srv.Close()
	n, err := scrapeCounter(context.Background(), srv.URL, "etcd_debugging_lease_renewed_total", time.Second)
	if err != nil || n != 1805 {
		t.Fatalf("%v, %v", n, err)
	}
	if _, err := scrapeCounter(context.Background(), srv.URL, "etcd_no_such_total", time.Second); err == nil {
		t.Fatal("a missing counter read as zero")
	}
}
