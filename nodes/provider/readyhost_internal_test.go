package provider

import (
	"context"
	"fmt"
	"net"
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
// start) makes a dial answer, but not the service ready.
func TestReadyAPortHeldByAnotherProcessIsNotTheService(t *testing.T) {
	if _, err := exec.LookPath("ps"); err != nil {
		t.Skip("ps is not installed")
	}
	l := &localHost{}
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	// The squatter: this test process. The service: a sleep that holds no
	// socket. The probe (a dial would do the same) passes.
	squat, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := supervised(t, &ReadyCheck{Command: []string{"/bin/true"}, Port: port, TimeoutSeconds: 3})
	s.Name, s.Command = "squatted", []string{"/bin/sleep", "600"}
	startLocal(t, l, s)
	_, err = awaitReady(context.Background(), l, s, false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d has a listener that is not service squatted's", port)) {
		t.Fatalf("a port another process holds: %v", err)
	}
	// A broken variant, ownership unchecked, passes it: the check is
	// what fails above.
	broken := *s
	broken.Ready = &ReadyCheck{Command: []string{"/bin/true"}, TimeoutSeconds: 3}
	if _, err := awaitReady(context.Background(), l, &broken, false); err != nil {
		t.Fatalf("without the port check: %v", err)
	}
	squat.Close()

	// The service itself listening passes.
	own := supervised(t, &ReadyCheck{Command: []string{"/bin/true"}, Port: port, TimeoutSeconds: 10})
	own.Name, own.Command = "listener", []string{os.Args[0], "-test.run=^TestListenHelper$"}
	own.Env = map[string]string{listenHelperEnv: addr}
	startLocal(t, l, own)
	if _, err := awaitReady(context.Background(), l, own, false); err != nil {
		t.Fatalf("the service's own listener: %v", err)
	}
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
