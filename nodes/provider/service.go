package provider

import (
	"context"
	"errors"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lockplane/lockplane/nodes/remote"
)

// ServiceInputs is a long-running process on a host: a systemd unit, or,
// on hosts without systemd (test hosts), a process kept running by a
// restart loop in its own session.
type ServiceInputs struct {
	Connection remote.Target     `json:"connection"`
	Name       string            `json:"name"`
	Mode       string            `json:"mode"` // systemd | supervised
	Command    []string          `json:"command"`
	Env        map[string]string `json:"env,omitempty"`
	WorkDir    string            `json:"workDir,omitempty"`
	// StateDir holds the pid file and log in supervised mode; UnitDir the
	// unit file in systemd mode (default /etc/systemd/system).
	StateDir string `json:"stateDir,omitempty"`
	UnitDir  string `json:"unitDir,omitempty"`
	// Triggers restart the service when they change: the checksums of the
	// files it reads.
	Triggers []string `json:"triggers,omitempty"`
	// Ready, when set, is run on the host after every start (create and
	// update): the Service is made only once it passes (ready.go).
	Ready *ReadyCheck `json:"ready,omitempty"`
}

// The service modes.
const (
	ModeSystemd    = "systemd"
	ModeSupervised = "supervised"
)

var serviceName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

func (s *ServiceInputs) pidFile() string { return path.Join(s.StateDir, s.Name+".pid") }

// LogFile is where a supervised service's output goes.
func (s *ServiceInputs) LogFile() string { return path.Join(s.StateDir, s.Name+".log") }

func (s *ServiceInputs) unitPath() string {
	dir := s.UnitDir
	if dir == "" {
		dir = "/etc/systemd/system"
	}
	return path.Join(dir, "lockplane-"+s.Name+".service")
}

// Unit is the systemd unit for the service. It is restarted 5 s after any
// exit, without systemd's start limit (5 starts in 10 s): a service that
// exits at once while what it needs is down (an arbiter waiting for its
// SVID or for quorum) must come back when that does, not stay failed until
// an operator resets it. The 5 s keep a service that cannot start from
// loading the clusters it signs in to; its NRestarts count shows it.
func (s *ServiceInputs) Unit() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Unit]\nDescription=Lockplane %s\nAfter=network-online.target\nWants=network-online.target\nStartLimitIntervalSec=0\n\n[Service]\n", s.Name)
	fmt.Fprintf(&b, "ExecStart=%s\n", remote.QuoteAll(s.Command))
	if s.WorkDir != "" {
		fmt.Fprintf(&b, "WorkingDirectory=%s\n", s.WorkDir)
	}
	for _, k := range sortedKeys(s.Env) {
		fmt.Fprintf(&b, "Environment=%s\n", strconv.Quote(k+"="+s.Env[k]))
	}
	b.WriteString("Restart=always\nRestartSec=5\nLimitNOFILE=65536\nTimeoutStopSec=30\n\n[Install]\nWantedBy=multi-user.target\n")
	return b.String()
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// stopMark is the file a stop by this resource leaves while it signals,
// so the supervisor can tell its own stop from anyone else's signal.
func (s *ServiceInputs) stopMark() string { return path.Join(s.StateDir, s.Name+".stopping") }

// startScript starts a supervised service: a loop in its own session
// (so stopping it is one signal to its process group) that restarts the
// command a second after it exits.
func (s *ServiceInputs) startScript() string {
	var env strings.Builder
	for _, k := range sortedKeys(s.Env) {
		env.WriteString(k + "=" + remote.Quote(s.Env[k]) + " ")
	}
	// The loop logs every signal that ends it or its command, and whether
	// this resource's stop sent it: any other is someone else's. (SIGINT
	// cannot be trapped here: a background job starts with it ignored.)
	loop := procScript + fmt.Sprintf(`note() { if [ -e %[5]s ]; then by="from its own stop"; else by="NOT from its own stop"; fi; echo "lockplane: %[4]s $1 at $(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ), $by"; }; `+
		`for sig in HUP TERM; do trap "note 'supervisor got SIG$sig'; trap - $sig; kill -$sig \$\$" $sig; done; `+
		// The pid file last: a stop that reads it finds the traps set. It
		// records when the group's leader started, so a pid reused after
		// a reboot is never taken for this service.
		`echo "$$ $(started $$)" > %[1]s; n=0; `+
		// Each start is counted: a readiness check passes only if the
		// same start answered twice (ready.go).
		`while :; do n=$((n+1)); echo $n > %[6]s; %[2]s%[3]s; st=$?; if [ $st -gt 128 ] && [ $st -le 192 ]; then note "was ended by signal $((st-128)) (exit status $st)"; fi; echo "lockplane: %[4]s exited with $st; restarting in 1s"; sleep 1; done`,
		remote.Quote(s.pidFile()), env.String(), remote.QuoteAll(s.Command), s.Name, remote.Quote(s.stopMark()), remote.Quote(s.startsFile()))
	wd := s.WorkDir
	if wd == "" {
		wd = s.StateDir
	}
	// The log is root's and its group's alone: what up shows of it is
	// redacted, the file itself is not.
	return fmt.Sprintf("mkdir -p %[1]s %[2]s\ncd %[2]s\nrm -f %[6]s %[7]s\ntouch %[4]s\nchmod 0640 %[4]s\nsetsid sh -c %[3]s >> %[4]s 2>&1 < /dev/null &\n"+
		"for i in $(seq 50); do [ -s %[5]s ] && break; sleep 0.1; done\ncat %[5]s\n",
		remote.Quote(s.StateDir), remote.Quote(wd), remote.Quote(loop), remote.Quote(s.LogFile()), remote.Quote(s.pidFile()), remote.Quote(s.stopMark()), remote.Quote(s.startsFile()))
}

// serviceStopWait bounds stopping a service: the stop script's TERM, its
// 10 s grace, KILL and 5 s more, with room for the connection.
const serviceStopWait = 30 * time.Second

// stopScript ends a supervised service's whole process group: TERM, then
// KILL after 10 s. It leaves its mark and a line in the service's log
// first, so a stop is never mistaken for a crash or an outside signal;
// both are best effort (a full disk must not keep a service running).
// A group that outlives KILL keeps its pid file and fails the stop: a
// new instance beside it would fail to bind while probes passed on the
// old one. A pid file that is not a process group (empty, 0 or 1, which
// kill would read as every process) is only removed.
func (s *ServiceInputs) stopScript() string {
	return groupScript + fmt.Sprintf(`pf=%[1]s
if [ -f "$pf" ]; then
  readpid "$pf"
  if ! group "$pid"; then
    echo "lockplane: %[2]s's pid file held '$pid', not a process group: removed" >> %[3]s 2>/dev/null || true
  elif ! ours "$pid" "$since" "$pf"; then
    echo "lockplane: %[2]s's pid file named process group $pid, which is now another process's (the host restarted, or the pid was reused): removed without a signal" >> %[3]s 2>/dev/null || true
  else
    touch %[4]s 2>/dev/null || true
    echo "lockplane: stopping %[2]s (process group $pid) at $(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)" >> %[3]s 2>/dev/null || true
    kill -TERM -"$pid" 2>/dev/null || true
    for i in $(seq 100); do live "$pid" || break; sleep 0.1; done
    ! live "$pid" || kill -KILL -"$pid" 2>/dev/null || true
    for i in $(seq 50); do live "$pid" || break; sleep 0.1; done
    if live "$pid"; then
      rm -f %[4]s
      echo "%[2]s: process group $pid still runs 5 s after SIGKILL (a process stuck in the kernel?); its pid file is kept" >&2
      exit 1
    fi
  fi
  rm -f "$pf" %[4]s
fi
`, remote.Quote(s.pidFile()), s.Name, remote.Quote(s.LogFile()), remote.Quote(s.stopMark()))
}

// procScript defines started: when process $1 started (clock ticks since
// boot, field 22 of its stat) and the boot it started in, or nothing if
// it is gone. The loop writes it beside its pid; the scripts below
// compare it before they act on the pid.
const procScript = `started() { [ -r "/proc/$1/stat" ] && echo "$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f20)/$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"; }
`

// groupScript defines the shell functions the stop, alive and readiness
// scripts share.
//   - readpid: the pid file's pid and when its process started.
//   - group: a pid names a process group (a number above 1: kill reads 0
//     as its own group and -1 as every process).
//   - ours: the group is still the one the pid file recorded. One from
//     another boot never is: after a reboot its pid names whatever took
//     it. In this boot, a leader alive with another start time is another
//     process that reuses the pid, long after the group ended; a leader
//     gone is still ours, since the kernel does not reuse a pid while any
//     process is in the group it names. A pid file without a start time
//     (written before it was recorded) is ours if written in this boot.
//   - live: the group has a member that is not a zombie (a zombie answers
//     kill -0 until its parent reaps it, which a host's init may never
//     do); without ps, kill -0 is the best there is.
const groupScript = procScript + `readpid() { pid= since=; read -r pid since < "$1" || true; }
group() { case "$1" in ''|*[!0-9]*|0|1) return 1 ;; esac; }
ours() {
  if [ -z "$2" ]; then [ "$(stat -c %Y "$3" 2>/dev/null || echo 0)" -ge "$(awk '/^btime/ { print $2 }' /proc/stat 2>/dev/null || echo 0)" ]; return; fi
  case "$2" in */"$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)") ;; *) return 1 ;; esac
  [ ! -e "/proc/$1" ] || [ "$(started "$1")" = "$2" ]
}
live() { if command -v ps >/dev/null 2>&1; then ps -o stat= -s "$1" 2>/dev/null | grep -qv '^Z'; else kill -0 -"$1" 2>/dev/null; fi; }
`

func (s *ServiceInputs) aliveScript() string {
	return groupScript + fmt.Sprintf(`pf=%s; if [ -f "$pf" ]; then readpid "$pf"; if group "$pid" && ours "$pid" "$since" "$pf" && live "$pid"; then echo running; fi; fi`, remote.Quote(s.pidFile()))
}

// startsFile counts a supervised service's starts (the loop's).
func (s *ServiceInputs) startsFile() string { return path.Join(s.StateDir, s.Name+".starts") }

// startService starts (or, as an update, restarts) s, then waits for its
// readiness check, if it has one, over the same connection.
func startService(ctx context.Context, env *Env, s *ServiceInputs, update bool) (map[string]any, error) {
	c, err := env.Pool.Dial(ctx, s.Connection)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if s.Mode == ModeSystemd {
		unit := s.unitPath()
		if _, err := c.Run(ctx, fmt.Sprintf("mkdir -p %s\ncat > %s <<'LOCKPLANE_UNIT'\n%sLOCKPLANE_UNIT\nsystemctl daemon-reload\nsystemctl enable lockplane-%s\nsystemctl restart lockplane-%s\n",
			remote.Quote(path.Dir(unit)), remote.Quote(unit), s.Unit(), s.Name, s.Name)); err != nil {
			return nil, err
		}
		out = map[string]any{"unit": unit}
	} else {
		res, err := c.Run(ctx, s.stopScript()+s.startScript())
		if err != nil {
			return nil, err
		}
		pid, err := strconv.Atoi(firstField(res)) // the pid file: pid, then when it started
		if err != nil {
			return nil, fmt.Errorf("%s: service %s did not start (no pid file); see %s", s.Connection.Host, s.Name, s.LogFile())
		}
		out = map[string]any{"pid": pid, "logFile": s.LogFile()}
	}
	return out, checkReady(ctx, c, s, out, update)
}

// checkReady waits for s's readiness check, if it has one, and records
// what answered in out.
func checkReady(ctx context.Context, c runner, s *ServiceInputs, out map[string]any, update bool) error {
	if s.Ready == nil {
		return nil
	}
	answered, err := awaitReady(ctx, c, s, update)
	out["answered"] = answered
	return err
}

// onlyReadyChanged reports whether news differs from olds in its
// readiness check alone.
func onlyReadyChanged(olds, news *ServiceInputs) bool {
	o, n := *olds, *news
	o.Ready, n.Ready = nil, nil
	return reflect.DeepEqual(o, n)
}

func stopService(ctx context.Context, env *Env, s *ServiceInputs) error {
	c, err := env.Pool.Dial(ctx, s.Connection)
	if err != nil {
		return err
	}
	if s.Mode == ModeSystemd {
		_, err := c.Run(ctx, fmt.Sprintf("systemctl disable --now lockplane-%s || true\nrm -f %s\nsystemctl daemon-reload\n", s.Name, remote.Quote(s.unitPath())))
		return err
	}
	_, err = c.Run(ctx, s.stopScript())
	return err
}

func init() {
	register("Service", spec[ServiceInputs]{
		Validate: func(in *ServiceInputs) error {
			if err := in.Connection.Validate(); err != nil {
				return err
			}
			if !serviceName.MatchString(in.Name) {
				return fmt.Errorf("name: %q must be lower case letters, digits and dashes, starting with a letter", in.Name)
			}
			if len(in.Command) == 0 || !path.IsAbs(in.Command[0]) {
				return errors.New("command: must start with an absolute path to the program")
			}
			for k := range in.Env {
				if !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) {
					return fmt.Errorf("env: %q is not a variable name", k)
				}
			}
			if in.Ready != nil {
				if err := in.Ready.validate(); err != nil {
					return err
				}
			}
			switch in.Mode {
			case ModeSupervised:
				return validatePath("stateDir", in.StateDir)
			case ModeSystemd:
				return nil
			}
			return fmt.Errorf("mode: %q must be %s or %s", in.Mode, ModeSystemd, ModeSupervised)
		},
		// A service that does not pass its readiness check fails its
		// create or update, its log on its host for an operator to read;
		// a failed create also stops it (below), and the next up starts
		// it again.
		Create: func(ctx context.Context, env *Env, in *ServiceInputs) (string, map[string]any, error) {
			out, err := startService(ctx, env, in, false)
			if err != nil {
				// Started but never ready, or perhaps started (a start
				// cut off, a pid file too late): a failed create is not in
				// the stack's state, so nothing of it may keep running
				// (under systemd, enabled across reboots) where destroy
				// cannot find it. The next up starts it again.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serviceStopWait)
				defer cancel()
				if serr := stopService(sctx, env, in); serr != nil {
					return "", nil, fmt.Errorf("%w\nand stopping it again failed: %v", err, serr)
				}
				return "", nil, fmt.Errorf("%w\nit was stopped again; the next up starts it", err)
			}
			return in.Connection.Host + ":" + in.Name, out, err
		},
		Read: func(ctx context.Context, env *Env, _ string, in *ServiceInputs, st map[string]any) (map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return nil, err
			}
			script := in.aliveScript()
			if in.Mode == ModeSystemd {
				script = fmt.Sprintf("systemctl is-active --quiet lockplane-%s && echo running || true", in.Name)
			}
			out, err := c.Run(ctx, script)
			if err != nil || strings.TrimSpace(out) != "running" {
				return nil, err
			}
			return st, nil
		},
		Update: func(ctx context.Context, env *Env, _ string, olds, news *ServiceInputs, st map[string]any) (map[string]any, error) {
			if onlyReadyChanged(olds, news) {
				// A new probe needs no restart: the running service is
				// checked with it.
				c, err := env.Pool.Dial(ctx, news.Connection)
				if err != nil {
					return nil, err
				}
				out := map[string]any{}
				for k, v := range st {
					if k == "pid" || k == "logFile" || k == "unit" {
						out[k] = v
					}
				}
				return out, checkReady(ctx, c, news, out, true)
			}
			return startService(ctx, env, news, true) // a restart with the new command, env or files
		},
		Delete: func(ctx context.Context, env *Env, _ string, in *ServiceInputs, _ map[string]any) error {
			return stopService(ctx, env, in)
		},
		Replaces: []string{"connection", "name", "mode", "stateDir", "unitDir"},
	})
}
