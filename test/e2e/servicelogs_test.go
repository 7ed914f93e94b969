package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lockplane/lockplane/test/hosts"
)

// serviceLogFiles are every supervised service's log on every test host
// (the Service resource's StateDir, under each host's root), by host.
func serviceLogFiles(h *hosts.Harness) map[string][]string {
	out := map[string][]string{}
	for _, host := range h.Hosts {
		out[host.Name], _ = filepath.Glob(filepath.Join(host.Root, "var", "lib", "lockplane", "run", "*.log"))
	}
	return out
}

// serviceLogs prints the last lines of every supervised service's log.
func serviceLogs(t *testing.T, h *hosts.Harness) {
	t.Helper()
	for host, logs := range serviceLogFiles(h) {
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("%s %s, last %d lines:\n  | %s", host, filepath.Base(l), min(len(lines), 15), strings.Join(lines[max(0, len(lines)-15):], "\n  | "))
		}
	}
}

// noOutsideSignals fails t if any service was signalled by someone other
// than its own Service resource, or its process group is gone without a
// stop (an untrappable SIGKILL leaves no line, but its pid file stays):
// what killed an arbiter as `up` ended (issue 33) would otherwise pass
// unseen whenever the drill's next step happened not to need it.
func noOutsideSignals(t *testing.T, h *hosts.Harness) {
	t.Helper()
	for host, logs := range serviceLogFiles(h) {
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			for _, line := range outsideSignals(string(b)) {
				t.Errorf("%s %s: a signal no stop of its Service sent: %s", host, filepath.Base(l), line)
			}
			pf := strings.TrimSuffix(l, ".log") + ".pid"
			pid, err := os.ReadFile(pf)
			if err != nil {
				continue // stopped by its Service, which removes the pid file
			}
			if pgid, err := strconv.Atoi(strings.TrimSpace(string(pid))); err != nil || pgid <= 1 || syscall.Kill(-pgid, 0) != nil {
				t.Errorf("%s %s: its process group %q is gone, but no stop removed its pid file", host, filepath.Base(pf), pid)
			}
		}
	}
}

// outsideSignals returns the supervisor's lines of a service log that
// name a signal its own Service's stop did not send.
func outsideSignals(log string) []string {
	var outside []string
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "lockplane: ") && strings.HasSuffix(line, ", NOT from its own stop") {
			outside = append(outside, line)
		}
	}
	return outside
}

func TestOutsideSignalsAreTheOnesNoStopAnnounced(t *testing.T) {
	log := strings.Join([]string{
		`{"msg":"arbiter serving"}`,
		`lockplane: stopping arbiter (process group 4242) at 2026-12-07T19:00:00Z`,
		`{"msg":"draining"}`,
		`lockplane: arbiter supervisor got SIGTERM at 2026-12-07T19:00:00Z, from its own stop`,
		`{"msg":"arbiter serving"}`,
		`lockplane: arbiter was ended by signal 9 at 2026-12-07T19:01:00Z, NOT from its own stop`,
		`lockplane: arbiter exited with 137; restarting in 1s`,
		`lockplane: arbiter supervisor got SIGHUP at 2026-12-07T19:02:00Z, NOT from its own stop`,
	}, "\n")
	got := outsideSignals(log)
	if len(got) != 2 || !strings.Contains(got[0], "signal 9") || !strings.Contains(got[1], "SIGHUP") {
		t.Fatalf("outside signals %q; want the KILL and the HUP no stop sent", got)
	}
}
