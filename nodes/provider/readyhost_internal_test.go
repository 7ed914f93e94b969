package provider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenHelperEnv makes this test binary a service that listens on the
// address it holds (TestMain-free helper process pattern).
const listenHelperEnv = "LOCKPLANE_TEST_LISTEN"

func TestListenHelper(t *testing.T) {
	addr := os.Getenv(listenHelperEnv)
	if addr == "" {
		t.Skip("a helper process for the readiness tests")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer l.Close()
	select {}
}

// freePort is a TCP port nothing listens on at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startLocal starts s's supervised loop on this machine and stops it when
// the test ends.
func startLocal(t *testing.T, l *localHost, s *ServiceInputs) {
	t.Helper()
	if _, err := l.Run(context.Background(), s.stopScript()+s.startScript()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Run(context.Background(), s.stopScript()) })
}

// A port's check passes only when the service itself listens there: a
// process of anyone else's that bound the port (between a stop and a
// start) makes a dial answer, but not the service ready. A listener on
// another address of the port takes none of the service's connections
// and does not stop it.
func TestReadyAnAddressHeldByAnotherProcessIsNotTheService(t *testing.T) {
	l := &localHost{}
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	// The squatter: this test process. The service: a sleep that holds no
	// socket. The probe (a dial would do the same) passes.
	squat, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/true"}, Listens: []string{addr}, TimeoutSeconds: 3})
	s.Name, s.Command = "squatted", []string{"/bin/sleep", "600"}
	startLocal(t, l, s)
	_, err = awaitReady(context.Background(), l, s, false)
	if err == nil || !strings.Contains(err.Error(), addr+" is listened on by a process that is not service squatted's") {
		t.Fatalf("an address another process holds: %v", err)
	}
	// A broken variant, ownership unchecked, passes it: the check is
	// what fails above.
	broken := *s
	broken.Ready = &ReadyCheck{Command: []string{"/bin/true"}, TimeoutSeconds: 3}
	if _, err := awaitReady(context.Background(), l, &broken, false); err != nil {
		t.Fatalf("without the address check: %v", err)
	}
	squat.Close()

	// The service itself listening passes, though another process holds
	// the same port on another address.
	other, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	own := supervised(t, &ReadyCheck{Command: []string{"/bin/true"}, Listens: []string{addr}, TimeoutSeconds: 10})
	own.Name, own.Command = "listener", []string{os.Args[0], "-test.run=^TestListenHelper$"}
	own.Env = map[string]string{listenHelperEnv: addr}
	startLocal(t, l, own)
	if _, err := awaitReady(context.Background(), l, own, false); err != nil {
		t.Fatalf("the service's own listener: %v", err)
	}
}

// The local addresses the check matches are the kernel's own spelling:
// this test's listener is found under them in /proc/net/tcp.
func TestProcNetAddrsAreHowTheKernelWritesThem(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.231.0.21:7443", "1500E70A:1D13 00000000:1D13 0000000000000000FFFF00001500E70A:1D13 00000000000000000000000000000000:1D13"},
		{"[fd00::1]:2380", "000000FD000000000000000001000000:094C 00000000000000000000000000000000:094C"},
	} {
		if got := strings.Join(procNetAddrs(netip.MustParseAddrPort(tc.addr)), " "); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.addr, got, tc.want)
		}
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skip(err)
	}
	if want := procNetAddrs(netip.MustParseAddrPort(l.Addr().String()))[0]; !strings.Contains(string(table), " "+want+" ") {
		t.Fatalf("/proc/net/tcp has no %s:\n%s", want, table)
	}
}

// The same start must answer twice: passes each by another start (a
// service restarting between checks, however quickly) are never ready.
func TestReadyPassesByDifferentStartsAreNotReady(t *testing.T) {
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/true"}, TimeoutSeconds: 3})
	r := &scripted{}
	for i := 1; i <= 10; i++ {
		r.outs = append(r.outs, fmt.Sprintf("10.231.9.9:7443\n%s[%d] [%d]\n", startsMarker, i, i))
	}
	if _, err := awaitReady(context.Background(), r, s, false); err == nil {
		t.Fatal("ready on passes by a new start each time")
	}
	r = &scripted{outs: []string{"a\n" + startsMarker + "[1] [1]\n", "b\n" + startsMarker + "[2] [2]\n", "c\n" + startsMarker + "[2] [2]\n"}}
	if got, err := awaitReady(context.Background(), r, s, false); err != nil || got != "c" || r.runs != 3 {
		t.Fatalf("two passes of start 2: %q after %d runs, %v", got, r.runs, err)
	}
}

// scripted answers each probe run with the next of outs, exit 0.
type scripted struct {
	outs []string
	runs int
}

func (r *scripted) Run(ctx context.Context, script string) (string, error) {
	if strings.Contains(script, "tail -n") {
		return "", nil // the log tail
	}
	r.runs++
	if r.runs > len(r.outs) {
		return "", errors.New("no more answers")
	}
	return r.outs[r.runs-1], nil
}

// A service that restarts while its check runs is not ready, however
// often the probe passes: the same start must answer twice.
func TestReadyAServiceThatKeepsRestartingIsNotReady(t *testing.T) {
	s := supervised(t, nil)
	// The probe passes, and the start count moves under it each time, as
	// a crash-looping service's would.
	s.Ready = &ReadyCheck{Command: []string{"/bin/sh", "-c", `n=$(cat "$0" 2>/dev/null || echo 0); echo $((n+1)) > "$0"; echo 10.231.9.9:7443`, s.startsFile()}, TimeoutSeconds: 3}
	_, err := awaitReady(context.Background(), &localHost{}, s, false)
	if err == nil || !strings.Contains(err.Error(), "the service restarted while its check ran") {
		t.Fatalf("a restarting service: %v", err)
	}
}

// After an update the check is UpdateCommand where one is set.
func TestReadyAnUpdateUsesItsOwnCheck(t *testing.T) {
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/false"}, UpdateCommand: []string{"/bin/echo", "updated"}, TimeoutSeconds: 3})
	if got, err := awaitReady(context.Background(), &localHost{}, s, true); err != nil || got != "updated" {
		t.Fatalf("update check: %q, %v", got, err)
	}
	if _, err := awaitReady(context.Background(), &localHost{}, s, false); err == nil {
		t.Fatal("create used the update's check")
	}
}

// A pid file whose process group is now someone else's (a reboot, a pid
// reused) gets no signal and does not count as running; the service's
// own group, recorded with its start, is stopped.
func TestAStalePidFileNeverSignalsAnotherProcess(t *testing.T) {
	l := &localHost{}
	ctx := context.Background()
	s := supervised(t, nil)
	s.Name = "stale"
	victim := exec.Command("/bin/sleep", "600")
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { victim.Wait(); close(exited) }()
	t.Cleanup(func() { victim.Process.Kill(); <-exited })
	pid := victim.Process.Pid

	// The pid file as the loop wrote it for a process that started at
	// another time (or in another boot) with the same pid.
	stale := fmt.Sprintf("%d 12345/00000000-0000-0000-0000-000000000000\n", pid)
	for _, script := range []struct {
		name, body string
	}{{"alive", s.aliveScript()}, {"stop", s.stopScript()}} {
		if err := os.WriteFile(s.pidFile(), []byte(stale), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := l.Run(ctx, script.body)
		if err != nil {
			t.Fatalf("%s: %v", script.name, err)
		}
		if strings.Contains(out, "running") {
			t.Fatalf("%s: a stale pid file counts as running", script.name)
		}
	}
	// The stop signals only after its "stopping" line: none means no
	// signal was sent.
	if log, _ := os.ReadFile(s.LogFile()); !strings.Contains(string(log), "which is now another process's") || strings.Contains(string(log), "stopping") {
		t.Fatalf("log:\n%s", log)
	}
	select {
	case <-exited:
		t.Fatal("the stop signalled a process group that was not the service's")
	default:
	}
	if _, err := os.Stat(s.pidFile()); !os.IsNotExist(err) {
		t.Fatal("the stale pid file was kept")
	}

	// A broken variant that takes the pid at its word signals the victim.
	brokenStop := strings.Replace(s.stopScript(), `ours() {`, `ours() { return 0; `, 1)
	if err := os.WriteFile(s.pidFile(), []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Run(ctx, brokenStop); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the broken variant did not signal the victim: the test cannot tell")
	}

	// The service's own group, its start recorded by the loop, stops.
	s.Command = []string{"/bin/sleep", "600"}
	if _, err := l.Run(ctx, s.startScript()); err != nil {
		t.Fatal(err)
	}
	if out, _ := l.Run(ctx, s.aliveScript()); !strings.Contains(out, "running") {
		t.Fatalf("its own group: %q", out)
	}
	if _, err := l.Run(ctx, s.stopScript()); err != nil {
		t.Fatal(err)
	}
	if out, _ := l.Run(ctx, s.aliveScript()); strings.Contains(out, "running") {
		t.Fatal("still running after its stop")
	}
}

// A pid file from another boot is never the service's, even when its pid
// names a process group whose leader is gone (as a daemon that forked
// into the background leaves): within a boot such a group could only be
// the service's, across one it is anyone's. A pid file of the older
// format (no start) is taken at its word only if written in this boot.
func TestAPidFileFromAnotherBootNeverSignals(t *testing.T) {
	l := &localHost{}
	ctx := context.Background()
	s := supervised(t, nil)
	s.Name = "rebooted"
	// A leaderless group: sh starts a sleep in its new session and exits.
	leader := exec.Command("setsid", "sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $$")
	out, err := leader.Output()
	if err != nil {
		t.Fatal(err)
	}
	pgid := firstField(string(out))
	t.Cleanup(func() { exec.Command("pkill", "-KILL", "-s", pgid).Run() })
	// Alive: a member that is not a zombie (this machine's init may be
	// slow to reap the killed sleep).
	alive := func() bool {
		out, _ := exec.Command("ps", "-o", "stat=", "-s", pgid).Output()
		for _, st := range strings.Fields(string(out)) {
			if !strings.HasPrefix(st, "Z") {
				return true
			}
		}
		return false
	}
	if !alive() {
		t.Fatal("the leaderless group is gone already")
	}
	for _, tc := range []struct {
		name, content string
		mtime         time.Time
	}{
		{"another boot", pgid + " 12345/00000000-0000-0000-0000-000000000000\n", time.Now()},
		{"the old format, before this boot", pgid + "\n", time.Unix(1, 0)},
	} {
		for _, script := range []string{s.aliveScript(), s.stopScript()} {
			if err := os.WriteFile(s.pidFile(), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(s.pidFile(), tc.mtime, tc.mtime); err != nil {
				t.Fatal(err)
			}
			if out, err := l.Run(ctx, script); err != nil || strings.Contains(out, "running") {
				t.Fatalf("%s: %q, %v: counted as running, or failed", tc.name, out, err)
			}
		}
		if log, _ := os.ReadFile(s.LogFile()); strings.Contains(string(log), "stopping") || !alive() {
			t.Fatalf("%s: the stop signalled a group that is not the service's:\n%s", tc.name, log)
		}
	}
	// The old format written in this boot is taken at its word: the group
	// is stopped (which shows the cases above would have been too).
	if err := os.WriteFile(s.pidFile(), []byte(pgid+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Run(ctx, s.stopScript()); err != nil {
		t.Fatal(err)
	}
	if alive() {
		t.Fatal("an old-format pid file of this boot did not stop its group")
	}
}
