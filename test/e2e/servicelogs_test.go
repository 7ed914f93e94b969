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

// eachServiceLog calls f with every supervised service's log on every
// test host (the Service resource's StateDir, under each host's root).
func eachServiceLog(h *hosts.Harness, f func(host, path string, log []byte)) {
	for _, host := range h.Hosts {
		logs, _ := filepath.Glob(filepath.Join(host.Root, "var", "lib", "lockplane", "run", "*.log"))
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil {
				f(host.Name, l, b)
			}
		}
	}
}

// serviceLogs prints the last lines of every supervised service's log.
func serviceLogs(t *testing.T, h *hosts.Harness) {
	t.Helper()
	eachServiceLog(h, func(host, path string, b []byte) {
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("%s %s, last %d lines:\n  | %s", host, filepath.Base(path), min(len(lines), 15), strings.Join(lines[max(0, len(lines)-15):], "\n  | "))
	})
}

// noOutsideSignals fails t if any service was signalled by someone other
// than its own Service resource, or its process group is gone without a
// stop (an untrappable SIGKILL leaves no line, but its pid file stays):
// what killed an arbiter as `up` ended (issue 33) would otherwise pass
// unseen whenever the drill's next step happened not to need it.
func noOutsideSignals(t *testing.T, h *hosts.Harness) {
	t.Helper()
	eachServiceLog(h, func(host, path string, b []byte) {
		for _, line := range outsideSignals(string(b)) {
			t.Errorf("%s %s: a signal no stop of its Service sent: %s", host, filepath.Base(path), line)
		}
		pf := strings.TrimSuffix(path, ".log") + ".pid"
		pid, err := os.ReadFile(pf)
		if err != nil {
			return // stopped by its Service, which removes the pid file
		}
		// The pid file: the group's leader, then when it started.
		if pgid, err := strconv.Atoi(firstField(string(pid))); err != nil || pgid <= 1 || syscall.Kill(-pgid, 0) != nil {
			t.Errorf("%s %s: its process group %q is gone, but no stop removed its pid file", host, filepath.Base(pf), pid)
		}
	})
}

// outsideSignals returns the lines of a service log that name a signal
// its own Service's stop did not send: the supervisor's, and a command's
// own that drained on a signal (the arbiter logs its cause) with no stop
// announced before it, as when only the command was signalled.
func outsideSignals(log string) []string {
	var outside []string
	announced := false
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(line, "lockplane: stopping "):
			announced = true
		case strings.HasPrefix(line, "lockplane: ") && strings.HasSuffix(line, ", NOT from its own stop"):
			outside = append(outside, line)
		case strings.Contains(line, `"msg":"draining"`) && strings.Contains(line, "signal received"):
			if !announced {
				outside = append(outside, line)
			}
			announced = false
		}
	}
	return outside
}

func TestOutsideSignalsAreTheOnesNoStopAnnounced(t *testing.T) {
	log := strings.Join([]string{
		`{"msg":"arbiter serving"}`,
		`lockplane: stopping arbiter (process group 4242) at 2026-12-07T19:00:00Z`,
		`{"msg":"draining","cause":"terminated signal received"}`,
		`lockplane: arbiter supervisor got SIGTERM at 2026-12-07T19:00:00Z, from its own stop`,
		`{"msg":"arbiter serving"}`,
		`lockplane: arbiter was ended by signal 9 (exit status 137) at 2026-12-07T19:01:00Z, NOT from its own stop`,
		`lockplane: arbiter exited with 137; restarting in 1s`,
		`lockplane: arbiter supervisor got SIGHUP at 2026-12-07T19:02:00Z, NOT from its own stop`,
		`{"msg":"arbiter serving"}`,
		`{"msg":"draining","cause":"interrupt signal received"}`,
		`lockplane: arbiter exited with 1; restarting in 1s`,
	}, "\n")
	got := outsideSignals(log)
	if len(got) != 3 || !strings.Contains(got[0], "signal 9") || !strings.Contains(got[1], "SIGHUP") || !strings.Contains(got[2], "interrupt") {
		t.Fatalf("outside signals %q; want the KILL, the HUP and the arbiter's own drain on SIGINT that no stop sent", got)
	}
}

// firstField is the first word of s, or "".
func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}
