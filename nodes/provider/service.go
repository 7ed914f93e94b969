package provider

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// startScript starts a supervised service: a loop in its own session
// (so stopping it is one signal to its process group) that restarts the
// command a second after it exits.
func (s *ServiceInputs) startScript() string {
	var env strings.Builder
	for _, k := range sortedKeys(s.Env) {
		env.WriteString(k + "=" + remote.Quote(s.Env[k]) + " ")
	}
	loop := fmt.Sprintf(`echo $$ > %s; while :; do %s%s; echo "lockplane: %s exited with $?; restarting in 1s"; sleep 1; done`,
		remote.Quote(s.pidFile()), env.String(), remote.QuoteAll(s.Command), s.Name)
	wd := s.WorkDir
	if wd == "" {
		wd = s.StateDir
	}
	return fmt.Sprintf("mkdir -p %[1]s %[2]s\ncd %[2]s\nsetsid sh -c %[3]s >> %[4]s 2>&1 < /dev/null &\n"+
		"for i in $(seq 50); do [ -s %[5]s ] && break; sleep 0.1; done\ncat %[5]s\n",
		remote.Quote(s.StateDir), remote.Quote(wd), remote.Quote(loop), remote.Quote(s.LogFile()), remote.Quote(s.pidFile()))
}

// stopScript ends a supervised service's whole process group: TERM, then
// KILL after 10 s.
func (s *ServiceInputs) stopScript() string {
	return fmt.Sprintf(`pf=%s
if [ -f "$pf" ]; then
  pid=$(cat "$pf")
  kill -TERM -"$pid" 2>/dev/null || true
  for i in $(seq 100); do kill -0 -"$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -"$pid" 2>/dev/null || true
  for i in $(seq 50); do kill -0 -"$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$pf"
fi
`, remote.Quote(s.pidFile()))
}

func (s *ServiceInputs) aliveScript() string {
	return fmt.Sprintf(`pf=%s; if [ -f "$pf" ] && kill -0 -"$(cat "$pf")" 2>/dev/null; then echo running; fi`, remote.Quote(s.pidFile()))
}

func startService(ctx context.Context, env *Env, s *ServiceInputs) (map[string]any, error) {
	c, err := env.Pool.Dial(ctx, s.Connection)
	if err != nil {
		return nil, err
	}
	if s.Mode == ModeSystemd {
		unit := s.unitPath()
		_, err := c.Run(ctx, fmt.Sprintf("mkdir -p %s\ncat > %s <<'LOCKPLANE_UNIT'\n%sLOCKPLANE_UNIT\nsystemctl daemon-reload\nsystemctl enable lockplane-%s\nsystemctl restart lockplane-%s\n",
			remote.Quote(path.Dir(unit)), remote.Quote(unit), s.Unit(), s.Name, s.Name))
		return map[string]any{"unit": unit}, err
	}
	out, err := c.Run(ctx, s.stopScript()+s.startScript())
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return nil, fmt.Errorf("%s: service %s did not start (no pid file); see %s", s.Connection.Host, s.Name, s.LogFile())
	}
	return map[string]any{"pid": pid, "logFile": s.LogFile()}, nil
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
			switch in.Mode {
			case ModeSupervised:
				return validatePath("stateDir", in.StateDir)
			case ModeSystemd:
				return nil
			}
			return fmt.Errorf("mode: %q must be %s or %s", in.Mode, ModeSystemd, ModeSupervised)
		},
		Create: func(ctx context.Context, env *Env, in *ServiceInputs) (string, map[string]any, error) {
			out, err := startService(ctx, env, in)
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
		Update: func(ctx context.Context, env *Env, _ string, olds, news *ServiceInputs, _ map[string]any) (map[string]any, error) {
			return startService(ctx, env, news) // a restart with the new command, env or files
		},
		Delete: func(ctx context.Context, env *Env, _ string, in *ServiceInputs, _ map[string]any) error {
			return stopService(ctx, env, in)
		},
		Replaces: []string{"connection", "name", "mode", "stateDir", "unitDir"},
	})
}
