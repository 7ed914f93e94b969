package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockplane/lockplane/nodes/remote"
)

// ReadyCheck is how a Service proves it serves: a command run on its host
// after every start, about once a second within a bounded wait, until it
// exits 0 twice running for the same start of the service (one that
// answers once and then falls over is not ready). Its last line of output
// is what answered (an address), kept as the Service's "answered" output.
type ReadyCheck struct {
	Command []string `json:"command"`
	// UpdateCommand, when set, is the check after a restart (an update)
	// instead of Command: an etcd member joining a formed cluster can be
	// asked for more than one starting beside its peers.
	UpdateCommand []string `json:"updateCommand,omitempty"`
	// Listens are the addresses (IP:port) the checks dial: each must be
	// listened on, there or on its port's wildcard, by the service's own
	// processes only. A dial alone would pass for anything a local user
	// bound there between a stop and a start.
	Listens []string `json:"listens,omitempty"`
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
	if r.UpdateCommand != nil && (len(r.UpdateCommand) == 0 || !path.IsAbs(r.UpdateCommand[0])) {
		return errors.New("ready.updateCommand: must start with an absolute path to the program")
	}
	for i, l := range r.Listens {
		if ap, err := netip.ParseAddrPort(l); err != nil || ap.Port() == 0 {
			return fmt.Errorf("ready.listens[%d]: %q must be an IP address and port, such as 10.0.0.1:2380", i, l)
		}
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

// probeScript runs cmd once, its output and errors together, under
// timeout(1) where the host has it, so a probe cut off by its deadline
// does not outlive the SSH session that ran it. When it passes and the
// check names a port, the port's listeners must all be the service's.
// Its last line is a startsMarker with the service's start count before
// and after the probe, which awaitReady compares.
func (s *ServiceInputs) probeScript(cmd []string, limit time.Duration) string {
	q := remote.QuoteAll(cmd)
	secs := max(1, int(limit/time.Second))
	var b strings.Builder
	b.WriteString(s.membersScript())
	fmt.Fprintf(&b, "before=$(starts)\nset +e\nif command -v timeout >/dev/null 2>&1; then timeout -k 1 %d %s 2>&1; else %s 2>&1; fi\nst=$?\n", secs, q, q)
	for _, l := range s.Ready.Listens {
		ap := netip.MustParseAddrPort(l) // validated
		fmt.Fprintf(&b, "if [ $st -eq 0 ]; then owns %s %s || st=3; fi\n", remote.Quote(l), remote.Quote(strings.Join(procNetAddrs(ap), " ")))
	}
	fmt.Fprintf(&b, "echo\necho \"%s[$before] [$(starts)]\"\nexit $st\n", startsMarker)
	return b.String()
}

// startsMarker begins the probe script's last line.
const startsMarker = "lockplane-starts: "

// membersScript defines, for s's host: starts, which changes with each
// start of the service (the loop's count; systemd's invocation ID), or
// is empty when it cannot tell (a loop an older provider started);
// members, the service's processes; and owns PORT, which passes when
// every TCP listener on PORT, on any address, is a socket one of them
// holds (a listener with SO_REUSEPORT beside the service's would take a
// share of its connections), and otherwise says why not. Everything
// outside the probe is bounded too: systemctl under timeout(1), the
// rest shell builtins, find and awk over /proc.
func (s *ServiceInputs) membersScript() string {
	var b strings.Builder
	b.WriteString("tmo() { if command -v timeout >/dev/null 2>&1; then timeout -k 1 5 \"$@\"; else \"$@\"; fi; }\n")
	if s.Mode == ModeSystemd {
		unit := "lockplane-" + s.Name
		fmt.Fprintf(&b, "starts() { tmo systemctl show -p InvocationID --value %s 2>/dev/null || true; }\n", unit)
		fmt.Fprintf(&b, "members() { cg=$(tmo systemctl show -p ControlGroup --value %s 2>/dev/null) && [ -n \"$cg\" ] && { cat \"/sys/fs/cgroup$cg/cgroup.procs\" 2>/dev/null || cat \"/sys/fs/cgroup/systemd$cg/cgroup.procs\" 2>/dev/null; } || true; }\n", unit)
	} else {
		b.WriteString(groupScript)
		fmt.Fprintf(&b, "starts() { cat %s 2>/dev/null || true; }\n", remote.Quote(s.startsFile()))
		// The session of each process is field 6 of its stat, after the
		// command name's last ") "; read with builtins, not ps, so that a
		// host without procps is checked too.
		fmt.Fprintf(&b, `members() {
  pf=%s; readpid "$pf" 2>/dev/null
  if group "$pid" && ours "$pid" "$since" "$pf"; then
    for d in /proc/[0-9]*; do
      line=; read -r line 2>/dev/null < "$d/stat" || continue
      set -- ${line##*) }
      [ "$4" = "$pid" ] && echo "${d#/proc/}"
    done
  fi
  return 0
}
`, remote.Quote(s.pidFile()))
	}
	// owns ADDR PATTERNS: PATTERNS are ADDR and its port's wildcards as
	// /proc/net/tcp{,6} write a local address (procNetAddrs); awk matches
	// them as strings (a number-like hex would compare as a number).
	fmt.Fprintf(&b, `owns() {
  files=/proc/net/tcp; [ -r /proc/net/tcp6 ] && files="$files /proc/net/tcp6"
  inodes=$(awk -v pats="$2" 'BEGIN { n = split(pats, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 } FNR > 1 && $4 == "0A" && ($2 in want) { print $10 }' $files)
  [ -n "$inodes" ] || { echo "nothing listens on $1"; return 1; }
  ms=$(members)
  for i in $inodes; do
    found=
    for m in $ms; do
      if [ -n "$(find "/proc/$m/fd" -maxdepth 1 -lname "socket:\[$i\]" 2>/dev/null)" ]; then found=1; break; fi
    done
    [ -n "$found" ] || { echo "$1 is listened on by a process that is not service %s's: another process bound it"; return 1; }
  done
}
`, s.Name)
	return b.String()
}

// procNetAddrs are the local addresses, as /proc/net/tcp and tcp6 write
// them (each 32-bit word in hex, host byte order: little-endian here),
// of a socket that takes ap's connections: ap itself, and its port on
// the wildcard address (and, for IPv4, IPv4-mapped IPv6).
func procNetAddrs(ap netip.AddrPort) []string {
	port := fmt.Sprintf(":%04X", ap.Port())
	word := func(b []byte) string {
		var s strings.Builder
		for i := 0; i+4 <= len(b); i += 4 {
			fmt.Fprintf(&s, "%02X%02X%02X%02X", b[i+3], b[i+2], b[i+1], b[i])
		}
		return s.String()
	}
	v6any := strings.Repeat("0", 32) + port
	a := ap.Addr()
	if a.Is4() || a.Is4In6() {
		v4 := a.Unmap().As4()
		mapped := netip.AddrFrom4(v4).As16()
		return []string{word(v4[:]) + port, "00000000" + port, word(mapped[:]) + port, v6any}
	}
	v6 := a.As16()
	return []string{word(v6[:]) + port, v6any}
}

// logTailScript prints the service's last log lines: its log file when
// supervised, its journal under systemd. It never fails: a log that
// cannot be read must not hide the probe's own failure.
func (s *ServiceInputs) logTailScript() string {
	if s.Mode == ModeSystemd {
		return fmt.Sprintf("journalctl -u lockplane-%s -n %d --no-pager -o cat 2>&1 || true\n", s.Name, readyLogLines)
	}
	return fmt.Sprintf("tail -n %d %s 2>&1 || true\n", readyLogLines, remote.Quote(s.LogFile()))
}

// runner runs a script on a host: a *remote.Conn, or a fake in tests.
type runner interface {
	Run(ctx context.Context, script string) (string, error)
}

// awaitReady runs s's probe on its host until it passes twice running
// for the same start of the service, or its wait ends, and returns the
// probe's last line of output. After an update (a restart of a running
// service) the probe is UpdateCommand where one is set. On timeout the
// error names the host, the service, the probe's last output and the
// last lines of the service's log, redacted and escaped for a terminal.
func awaitReady(ctx context.Context, c runner, s *ServiceInputs, update bool) (string, error) {
	r := s.Ready
	cmd := r.Command
	if update && r.UpdateCommand != nil {
		cmd = r.UpdateCommand
	}
	wait := r.wait()
	deadline := time.Now().Add(wait)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last string
	var lastErr error
	var passed *string // the start that answered the run before, if one did
	for {
		limit := min(ProbeRunTimeout, time.Until(deadline))
		if limit <= 0 {
			break
		}
		// timeout(1) on the host ends the probe (and its kill-after) first;
		// the run's own deadline is the backstop for a host without it, so
		// a probe is never left running on the host by our giving up.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), limit+probeRunSlack)
		raw, err := c.Run(rctx, s.probeScript(cmd, limit))
		rcancel()
		out, before, after := splitStarts(raw)
		switch {
		case err == nil && before != after:
			err = errors.New("the service restarted while its check ran")
			out = strings.TrimRight(out, "\n") + "\n(it answered, but the service restarted while its check ran)"
			passed = nil
		case err == nil && passed != nil && *passed == after:
			return lastLine(out), nil
		case err == nil:
			passed = &after
		default:
			passed = nil
		}
		if err != nil {
			// A run that said nothing (cut off by its deadline, or by the
			// wait's end) says less than one before it that said why.
			if strings.TrimSpace(out) != "" || last == "" {
				last, lastErr = out, err
				if exit := (*remote.ExitError)(nil); errors.As(err, &exit) && exit.Status == 124 {
					last = strings.TrimRight(out, "\n") + fmt.Sprintf("\n(no answer within the probe's own deadline, %s)", limit.Round(time.Second))
				}
			}
		}
		// Retried on the ticker: there is no event for a service that
		// starts to answer, nor for one that stays up.
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
	if exit := (*remote.ExitError)(nil); probe == "" && errors.As(lastErr, &exit) {
		probe = fmt.Sprintf("(exit status %d, nothing printed)", exit.Status)
	} else if probe == "" && lastErr != nil {
		probe = lastErr.Error()
	}
	return "", fmt.Errorf("%s: service %s did not pass its readiness check within %s\nprobe %s, last output:\n%s\nlast %d lines of its log:\n%s",
		s.Connection.Host, s.Name, wait, printable(redact(remote.QuoteAll(cmd))), indented(redact(probe)), readyLogLines, indented(redact(logs)))
}

// splitStarts takes the probe script's startsMarker line off its output
// and returns the start counts it gives, before and after the probe
// ("" where the host cannot tell).
func splitStarts(raw string) (out, before, after string) {
	trimmed := strings.TrimRight(raw, "\n")
	i := strings.LastIndex(trimmed, "\n"+startsMarker)
	switch {
	case i >= 0:
		out, trimmed = trimmed[:i], trimmed[i+1:]
	case strings.HasPrefix(trimmed, startsMarker):
		out = ""
	default:
		return raw, "", ""
	}
	m := startsLine.FindStringSubmatch(trimmed)
	if m == nil {
		return out, "", ""
	}
	return out, m[1], m[2]
}

var startsLine = regexp.MustCompile(`^` + startsMarker + `\[([^\]]*)\] \[([^\]]*)\]$`)

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
