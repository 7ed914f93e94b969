package provider

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A supervised service's log says which signals were its own stop's and
// which came from anyone else: the line that would have named what
// killed an arbiter as `up` ended (issue 33).
func TestTheSupervisorTellsItsOwnStopFromAnOutsideSignal(t *testing.T) {
	l := &localHost{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := supervised(t, nil)
	s.Name, s.Command = "sleeper", []string{"/bin/sleep", "600"}
	start := func() int {
		out, err := l.Run(ctx, s.stopScript()+s.startScript())
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(firstField(out))
		if err != nil || pid <= 1 {
			t.Fatalf("start printed %q", out)
		}
		return pid
	}
	// An outside TERM to the whole group, as issue 33's arbiter got.
	pgid := start()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, ctx, s.LogFile(), "sleeper supervisor got SIGTERM at ", ", NOT from its own stop")

	// Its own stop: the same signal, marked as its own.
	start()
	if _, err := l.Run(ctx, s.stopScript()); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, ctx, s.LogFile(), "sleeper supervisor got SIGTERM at ", ", from its own stop")
	if _, err := os.Stat(s.stopMark()); !os.IsNotExist(err) {
		t.Errorf("the stop left its mark behind (%v): the next outside signal would pass for its own", err)
	}
}

// A pid file that is no process group (1 would make kill signal every
// process) is removed without a signal.
func TestAStopNeverSignalsWhatIsNotAProcessGroup(t *testing.T) {
	l := &localHost{}
	s := supervised(t, nil)
	for _, bad := range []string{"", "1", "0", "-1", "1 2"} {
		if err := os.WriteFile(s.pidFile(), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Run(context.Background(), s.stopScript()); err != nil {
			t.Fatalf("stop with pid file %q: %v", bad, err)
		}
		if _, err := os.Stat(s.pidFile()); !os.IsNotExist(err) {
			t.Fatalf("pid file %q kept", bad)
		}
	}
	log, _ := os.ReadFile(s.LogFile())
	if strings.Count(string(log), "not a process group: removed") != 5 || strings.Contains(string(log), "stopping") {
		t.Fatalf("log:\n%s", log)
	}
}

func awaitLine(t *testing.T, ctx context.Context, file, prefix, suffix string) {
	t.Helper()
	for {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, prefix) && strings.HasSuffix(line, suffix) {
				os.WriteFile(file, nil, 0o644) // the next wait reads only new lines
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never said %q…%q:\n%s", file, prefix, suffix, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
