package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/nodes/remote"
)

// localHost runs scripts as the Service's SSH connection would (sh -e -s
// with the script on stdin), on this machine: the readiness scripts and
// loop, without test hosts.
type localHost struct{ runs int }

func (l *localHost) Run(ctx context.Context, script string) (string, error) {
	l.runs++
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, "sh", "-e", "-s")
	c.Stdin, c.Stdout, c.Stderr = strings.NewReader(script), &stdout, &stderr
	c.WaitDelay = time.Second
	err := c.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		return stdout.String(), &remote.ExitError{Host: "local", Script: script, Status: exit.ExitCode(), Stderr: stderr.String()}
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("local: %w", ctx.Err())
	}
	return stdout.String(), err
}

func supervised(t *testing.T, ready *ReadyCheck) *ServiceInputs {
	t.Helper()
	s := &ServiceInputs{Connection: remote.Target{Host: "10.231.9.9"}, Name: "arbiter", Mode: ModeSupervised,
		Command: []string{"/bin/true"}, StateDir: t.TempDir(), Ready: ready}
	return s
}

// A service whose probe never passes fails within its bounded wait, and
// the error names the host, the service, the probe's last output and the
// last 20 lines of the service's log, escaped for a terminal.
func TestReadyAServiceThatNeverAnswersFailsNamingHostServiceAndLog(t *testing.T) {
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/sh", "-c", `echo "dial 10.231.9.9:7443: connection refused"; exit 1`}, TimeoutSeconds: 3})
	var log strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&log, "log line %d\n", i)
	}
	log.WriteString("\x1b[2J\x1b[Hcleared your screen\u202e\n") // a hostile last line
	if err := os.WriteFile(s.LogFile(), []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &localHost{}
	start := time.Now()
	answered, err := awaitReady(context.Background(), h, s, false)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("a probe that never passes: ready, answered %q", answered)
	}
	if took > 3*time.Second+ProbeRunTimeout {
		t.Errorf("failed after %s, want within the 3 s wait and one log read", took)
	}
	if h.runs < 3 {
		t.Errorf("the probe ran %d times in 3 s, want about once a second", h.runs)
	}
	msg := err.Error()
	for _, want := range []string{"10.231.9.9", "service arbiter", "within 3s", "connection refused",
		"  | log line 30", "  | log line 12", `\u001b[2J\u001b[Hcleared your screen\u202e`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "log line 11\n") || strings.ContainsAny(msg, "\x1b\u202e") {
		t.Errorf("error shows more than the last 20 lines, or raw escapes:\n%q", msg)
	}
}

// A probe that passes after the service takes a while: the wait ends at
// its second pass in a row for the same start (no restart between), and
// what answered is its last line.
func TestReadyWaitsForTwoPassesOfOneStartAndKeepsWhatAnswered(t *testing.T) {
	count := filepath.Join(t.TempDir(), "count")
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/sh", "-c",
		`echo x >> "$0"; [ "$(wc -l < "$0")" -ge 3 ] || { echo not yet; exit 1; }; echo probing; echo 10.231.9.9:7443`, count}})
	h := &localHost{}
	answered, err := awaitReady(context.Background(), h, s, false)
	if err != nil {
		t.Fatal(err)
	}
	if answered != "10.231.9.9:7443" || h.runs != 4 {
		t.Fatalf("answered %q after %d runs, want 10.231.9.9:7443 after 4 (failing twice, then passing twice)", answered, h.runs)
	}
}

// A probe that hangs is cut off by its own deadline, and the wait goes on
// to its bound rather than hanging with it.
func TestReadyAHungProbeIsCutOffByItsOwnDeadline(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("timeout(1) is not installed")
	}
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/sleep", "600"}, TimeoutSeconds: 2})
	start := time.Now()
	_, err := awaitReady(context.Background(), &localHost{}, s, false)
	if err == nil || time.Since(start) > 2*time.Second+ProbeRunTimeout {
		t.Fatalf("a hung probe: %v after %s", err, time.Since(start))
	}
}

// The journal is a systemd service's log.
func TestReadyReadsASystemdServicesJournal(t *testing.T) {
	s := &ServiceInputs{Name: "etcd-coord", Mode: ModeSystemd}
	if got := s.logTailScript(); !strings.Contains(got, "journalctl -u lockplane-etcd-coord -n 20 --no-pager") {
		t.Fatalf("log script %q", got)
	}
}

// The bound is checked where the inputs are, naming the field and rule.
func TestReadyInputsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		r    ReadyCheck
		want string
	}{
		{ReadyCheck{}, "ready.command"},
		{ReadyCheck{Command: []string{"probe"}}, "ready.command: must start with an absolute path"},
		{ReadyCheck{Command: []string{"/bin/true"}, TimeoutSeconds: 601}, "ready.timeoutSeconds: 601 must be between 1 and 600"},
		{ReadyCheck{Command: []string{"/bin/true"}, TimeoutSeconds: -1}, "ready.timeoutSeconds"},
	} {
		if err := tc.r.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
	if err := (&ReadyCheck{Command: []string{"/bin/true"}}).validate(); err != nil {
		t.Fatal(err)
	}
}

// A changed probe alone checks the running service again, without a
// restart; any other change restarts it.
func TestReadyAChangedProbeAloneDoesNotRestart(t *testing.T) {
	a := supervised(t, &ReadyCheck{Command: []string{"/bin/true"}})
	b := *a
	b.Ready = &ReadyCheck{Command: []string{"/bin/false"}}
	if !onlyReadyChanged(a, &b) {
		t.Fatal("only the probe changed")
	}
	b.Command = []string{"/bin/sleep", "1"}
	if onlyReadyChanged(a, &b) {
		t.Fatal("the command changed too")
	}
}
