package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/infra/monitoring/dashboards"
	"github.com/lockplane/lockplane/test/hosts"
)

// webhookPort is where the local stack's Alertmanager posts (its
// monitoring.platformWebhook and the demo namespace's owner), on this
// machine's address on the hosts' bridge.
const webhookPort = 9099

// webhooks are the receivers the local stack names: what Alertmanager
// posted to each path.
type webhooks struct {
	mu       sync.Mutex
	got      map[string][]alert // by path: /platform, /demo
	received chan struct{}
}

// alert is one alert of a webhook post (Alertmanager's webhook format).
type alert struct {
	Status string            `json:"status"`
	Labels map[string]string `json:"labels"`
}

// startWebhooks serves the receivers until the test ends.
func startWebhooks(t *testing.T, h *hosts.Harness) *webhooks {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", h.BridgeAddress(), webhookPort))
	if err != nil {
		t.Fatalf("the alert receivers: %v", err)
	}
	w := &webhooks{got: map[string][]alert{}, received: make(chan struct{}, 1)}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/platform" && r.URL.Path != "/demo" {
			http.NotFound(rw, r)
			return
		}
		var body struct {
			Alerts []alert `json:"alerts"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 1<<20)).Decode(&body); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		if len(w.got[r.URL.Path]) < 10_000 {
			w.got[r.URL.Path] = append(w.got[r.URL.Path], body.Alerts...)
		}
		w.mu.Unlock()
		select {
		case w.received <- struct{}{}:
		default:
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return w
}

// has reports whether path got a firing alert named name with labels.
func (w *webhooks) has(path, name string, labels map[string]string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.got[path] {
		if a.Status == "firing" && a.Labels["alertname"] == name && matches(a.Labels, labels) {
			return true
		}
	}
	return false
}

// await waits for Alertmanager to post the firing alert to path: each
// post wakes it.
func (w *webhooks) await(t *testing.T, within time.Duration, path, name string, labels map[string]string) {
	t.Helper()
	deadline := time.After(within)
	for !w.has(path, name, labels) {
		select {
		case <-w.received:
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("no firing %s%v posted to %s within %v; posted: %v", name, labels, path, within, w.got)
		}
	}
}

// posted is what path got.
func (w *webhooks) posted(path string) []alert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got[path])
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// awaitTargetsUp waits until Prometheus has scraped every one of its n
// targets successfully; a scrape has no event to wait on, so it polls.
func awaitTargetsUp(t *testing.T, prometheus string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var down []string
	for time.Now().Before(deadline) {
		var body struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string `json:"labels"`
					Health    string            `json:"health"`
					LastError string            `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		getJSON(t, prometheus+"/api/v1/targets?state=active", &body)
		down = nil
		for _, a := range body.Data.ActiveTargets {
			if a.Health != "up" {
				down = append(down, fmt.Sprintf("%s %s %s: %s %s", a.Labels["job"], a.Labels["host"], a.Labels["instance"], a.Health, a.LastError))
			}
		}
		if len(body.Data.ActiveTargets) == n && len(down) == 0 {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("Prometheus's targets not all up (want %d): %s", n, strings.Join(down, "; "))
}

// awaitFiring waits until Alertmanager's API lists the alert as active.
func awaitFiring(t *testing.T, alertmanager, name string, labels map[string]string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var seen []string
	for time.Now().Before(deadline) {
		var alerts []struct {
			Labels map[string]string `json:"labels"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		getJSON(t, alertmanager+"/api/v2/alerts?active=true", &alerts)
		seen = nil
		for _, a := range alerts {
			if a.Labels["alertname"] == name && matches(a.Labels, labels) {
				return
			}
			seen = append(seen, a.Labels["alertname"])
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("%s%v not active in Alertmanager within %v; active: %v", name, labels, within, seen)
}

func getJSON(t *testing.T, url string, into any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// partition cuts host off the bridge, as a switch port going down would;
// the returned heal puts it back. No process is signalled.
func partition(t *testing.T, host *hosts.Host) (heal func()) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", host.Link, "down").CombinedOutput(); err != nil {
		t.Fatalf("partition %s: %v %s", host.Name, err, out)
	}
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		if out, err := exec.Command("ip", "link", "set", host.Link, "up").CombinedOutput(); err != nil {
			t.Errorf("heal %s: %v %s", host.Name, err, out)
		}
	}
	t.Cleanup(heal)
	return heal
}

// exitCode is a finished command's exit status; -1 if it did not exit.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	return -1
}

// checkDashboards runs every panel's query of the shipped dashboards
// against the region's Prometheus, every variable set to match all: none
// may fail, and none may come back empty while the region has traffic,
// except those whose event the drill has not caused by then (optional,
// by a part of the query).
func checkDashboards(t *testing.T, prometheus string, optional ...string) {
	t.Helper()
	qs, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var empty []string
	n := 0
	for file, exprs := range qs {
		for _, e := range exprs {
			n++
			q := strings.NewReplacer("$cluster", ".*", "$namespace", ".*").Replace(e)
			var body struct {
				Status string `json:"status"`
				Data   struct {
					Result []json.RawMessage `json:"result"`
				} `json:"data"`
			}
			getJSON(t, prometheus+"/api/v1/query?query="+url.QueryEscape(q), &body)
			if body.Status != "success" {
				t.Errorf("%s: %s: status %s", file, e, body.Status)
			}
			if len(body.Data.Result) == 0 && !slices.ContainsFunc(optional, func(o string) bool { return strings.Contains(e, o) }) {
				empty = append(empty, file+": "+e)
			}
		}
	}
	if len(empty) > 0 {
		t.Errorf("dashboard panels with no series while the region has traffic:\n%s", strings.Join(empty, "\n"))
	}
	t.Logf("dashboards: %d panel queries ran against the region's Prometheus", n)
}
