package provider

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockplane/lockplane/nodes/remote"
)

// ReadyCheck is how a Service proves it serves: a command run on its host
// after every start until it exits 0, about once a second, within a bounded
// wait. Its last line of output is what answered (an address), kept as the
// Service's "answered" output.
type ReadyCheck struct {
	Command []string `json:"command"`
	// TimeoutSeconds bounds the whole wait: DefaultReadyWait when 0, at
	// most MaxReadyWait.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
}

// The bounds of a readiness wait: up fails a service that does not answer
// within them, rather than report a region that does not serve.
const (
	DefaultReadyWait = 120 * time.Second
	MaxReadyWait     = 600 * time.Second
	// ProbeRunTimeout is each probe run's own deadline: one hung probe
	// must not spend the whole wait.
	ProbeRunTimeout = 10 * time.Second
	// probeRunSlack is how long past timeout(1)'s limit (its kill-after
	// included) a probe run's SSH call waits.
	probeRunSlack = 3 * time.Second
	// readyLogLines are the lines of the service's log a failure shows.
	readyLogLines = 20
)

// validate checks the command and the bound, naming the field.
func (r *ReadyCheck) validate() error {
	if len(r.Command) == 0 || !path.IsAbs(r.Command[0]) {
		return errors.New("ready.command: must start with an absolute path to the program")
	}
	if r.TimeoutSeconds < 0 || time.Duration(r.TimeoutSeconds)*time.Second > MaxReadyWait {
		return fmt.Errorf("ready.timeoutSeconds: %d must be between 1 and %d (0: %d)", r.TimeoutSeconds,
			int(MaxReadyWait/time.Second), int(DefaultReadyWait/time.Second))
	}
	return nil
}

func (r *ReadyCheck) wait() time.Duration {
	if r.TimeoutSeconds == 0 {
		return DefaultReadyWait
	}
	return time.Duration(r.TimeoutSeconds) * time.Second
}

// probeScript runs the probe once, its output and errors together, under
// timeout(1) where the host has it, so a probe cut off by its deadline
// does not outlive the SSH session that ran it.
func (r *ReadyCheck) probeScript(limit time.Duration) string {
	cmd := remote.QuoteAll(r.Command)
	secs := max(1, int(limit/time.Second))
	return fmt.Sprintf("if command -v timeout >/dev/null 2>&1; then exec timeout -k 1 %d %s 2>&1; fi\nexec %s 2>&1\n", secs, cmd, cmd)
}

// logTailScript prints the service's last log lines: its log file when
// supervised, its journal under systemd. It never fails: a log that
// cannot be read must not hide the probe's own failure.
func (s *ServiceInputs) logTailScript() string {
	if s.Mode == ModeSystemd {
		return fmt.Sprintf("journalctl -u lockplane-%s -n %d --no-pager 2>&1 || true\n", s.Name, readyLogLines)
	}
	return fmt.Sprintf("tail -n %d %s 2>&1 || true\n", readyLogLines, remote.Quote(s.LogFile()))
}

// runner runs a script on a host: a *remote.Conn, or a fake in tests.
type runner interface {
	Run(ctx context.Context, script string) (string, error)
}

// awaitReady runs s's probe on its host until it passes or its wait ends,
// and returns the probe's last line of output. On timeout the error names
// the host, the service, the probe's last output and the last lines of
// the service's log, escaped for a terminal.
func awaitReady(ctx context.Context, c runner, s *ServiceInputs) (string, error) {
	r := s.Ready
	wait := r.wait()
	deadline := time.Now().Add(wait)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last string
	var lastErr error
	for {
		limit := min(ProbeRunTimeout, time.Until(deadline))
		if limit <= 0 {
			break
		}
		// timeout(1) on the host ends the probe (and its kill-after) first;
		// the run's own deadline is the backstop for a host without it, so
		// a probe is never left running on the host by our giving up.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), limit+probeRunSlack)
		out, err := c.Run(rctx, r.probeScript(limit))
		rcancel()
		if err == nil {
			return lastLine(out), nil
		}
		// A run that said nothing (cut off by its deadline, or by the
		// wait's end) says less than one before it that said why.
		if strings.TrimSpace(out) != "" || last == "" {
			last, lastErr = out, err
			if exit := (*remote.ExitError)(nil); errors.As(err, &exit) && exit.Status == 124 {
				last = strings.TrimRight(out, "\n") + fmt.Sprintf("\n(no answer within the probe's own deadline, %s)", limit.Round(time.Second))
			}
		}
		// Retried on the ticker: there is no event for a service that
		// starts to answer.
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	// The log is read on a context of its own: the wait's is spent.
	lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), ProbeRunTimeout)
	defer lcancel()
	logs, err := c.Run(lctx, s.logTailScript())
	if err != nil {
		logs = "(the log could not be read: " + err.Error() + ")"
	}
	probe := strings.TrimSpace(last)
	if probe == "" && lastErr != nil {
		probe = lastErr.Error()
	}
	return "", fmt.Errorf("%s: service %s did not pass its readiness check within %s\nprobe %s, last output:\n%s\nlast %d lines of its log:\n%s",
		s.Connection.Host, s.Name, wait, printable(remote.QuoteAll(r.Command)), indented(probe), readyLogLines, indented(logs))
}

// lastLine is the last non-empty line of out, escaped: what answered.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return printable(strings.TrimSpace(lines[len(lines)-1]))
}

// indented is text from the host, each line escaped and marked, so it
// cannot pass for a line of the provider's own.
func indented(text string) string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return "  | (none)"
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = "  | " + printable(strings.TrimSuffix(l, "\r"))
	}
	return strings.Join(lines, "\n")
}

// printable is s with what a terminal would act on or hide escaped:
// control characters (escape sequences, carriage returns), format
// characters (bidirectional overrides), unassigned and private-use
// characters as Go quotes them, and bytes that are not UTF-8 as \xNN. A
// service's log is not trusted to leave the operator's terminal as it was.
func printable(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\t':
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp) || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		s = s[n:]
	}
	return b.String()
}
