package childproc

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test unless ch closes within d: the bound on an event
// that should come at once, not a sleep.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

// closed fails the test unless ch is closed now.
func closed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal(what)
	}
}

// signalled fails the test unless p exited by sig.
func signalled(t *testing.T, p *Process, sig syscall.Signal) {
	t.Helper()
	st := p.ProcessState()
	if st == nil {
		t.Fatal("no exit state after exit")
	}
	ws := st.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != sig {
		t.Fatalf("exited %v, want killed by %v", st, sig)
	}
}

func start(t *testing.T, opts []Option, name string, args ...string) *Process {
	t.Helper()
	p, err := Start(exec.Command(name, args...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestDoneClosesOnExit(t *testing.T) {
	p := start(t, nil, "/bin/sh", "-c", "exit 3")
	within(t, p.Done(), 10*time.Second, "exit")
	if got := p.ProcessState().ExitCode(); got != 3 {
		t.Fatalf("exit code %d, want 3", got)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after exit: %v, want os.ErrProcessDone", err)
	}
}

func TestProcessStateNilWhileRunning(t *testing.T) {
	p := start(t, nil, "/bin/sleep", "60")
	if st := p.ProcessState(); st != nil {
		t.Fatalf("exit state %v of a running child", st)
	}
	if p.Pid() <= 0 {
		t.Fatalf("pid %d", p.Pid())
	}
}

func TestStopTerminates(t *testing.T) {
	p := start(t, nil, "/bin/sleep", "60")
	p.Stop(time.Minute)
	signalled(t, p, syscall.SIGTERM)
}

func TestStopKillsAfterGrace(t *testing.T) {
	// The trap is in place once the child says so; exec keeps the ignored
	// TERM, so nothing is left behind.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", `trap "" TERM; echo ready; exec /bin/sleep 60`)
	cmd.Stdout = w
	p, err := Start(cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if line, _ := bufio.NewReader(r).ReadString('\n'); line != "ready\n" {
		t.Fatalf("child said %q", line)
	}
	grace := 200 * time.Millisecond
	t0 := time.Now()
	p.Stop(grace)
	if took := time.Since(t0); took < grace {
		t.Fatalf("stopped in %s, before the grace of %s", took, grace)
	}
	signalled(t, p, syscall.SIGKILL)
}

func TestKillStoppedChild(t *testing.T) {
	p := start(t, nil, "/bin/sleep", "60")
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	awaitState(t, p.Pid(), 'T')
	p.Kill()
	closed(t, p.Done(), "Kill returned before the exit")
	signalled(t, p, syscall.SIGKILL)
}

func TestWaitKillsAfterD(t *testing.T) {
	p := start(t, nil, "/bin/sleep", "60")
	if p.Wait(100 * time.Millisecond) {
		t.Fatal("Wait true for a child that runs on")
	}
	closed(t, p.Done(), "Wait returned before the exit")
	signalled(t, p, syscall.SIGKILL)
}

func TestWaitExitsBySelf(t *testing.T) {
	p := start(t, nil, "/bin/true")
	if !p.Wait(30 * time.Second) {
		t.Fatal("Wait false for a child that exits at once")
	}
	if st := p.ProcessState(); !st.Success() {
		t.Fatalf("exited %v", st)
	}
}

func TestPdeathsigOption(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if a := cmd.SysProcAttr; a.Pdeathsig != syscall.SIGKILL || !a.Setpgid {
		t.Fatalf("SysProcAttr %+v: want Pdeathsig SIGKILL and the caller's Setpgid", a)
	}
	cmd = exec.Command("/bin/true")
	if p, err = Start(cmd, SurviveParent()); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if a := cmd.SysProcAttr; a != nil && a.Pdeathsig != 0 {
		t.Fatalf("SurviveParent: Pdeathsig %v", a.Pdeathsig)
	}
	// A caller's own Pdeathsig stands, and the reaper's wait for output
	// pipes is bounded.
	cmd = exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if p, err = Start(cmd); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGTERM || cmd.WaitDelay != waitDelay {
		t.Fatalf("Pdeathsig %v, WaitDelay %v: want the caller's SIGTERM and %v", cmd.SysProcAttr.Pdeathsig, cmd.WaitDelay, waitDelay)
	}
}

// TestStarterThreadExit starts children from a goroutine locked to its
// thread that then returns, ending the thread (go.dev/issue/27505): a
// bare exec.Cmd with Pdeathsig dies with that thread; a Process does not,
// since Start forks from a goroutine of its own. (That this goroutine's
// thread stays locked until the child is reaped, so no other goroutine
// can end it, is by construction in Start: no test here can tell.)
func TestStarterThreadExit(t *testing.T) {
	var bare *exec.Cmd
	var p *Process
	tid := onEndingThread(t, func() {
		bare = exec.Command("/bin/sleep", "60")
		bare.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := bare.Start(); err != nil {
			t.Error(err)
			return
		}
		var err error
		if p, err = Start(exec.Command("/bin/sleep", "60")); err != nil {
			t.Error(err)
		}
	})
	if bare == nil || bare.Process == nil || p == nil {
		t.FailNow()
	}
	defer p.Kill()
	defer bare.Process.Kill()
	awaitGone(t, "/proc/self/task/"+strconv.Itoa(tid))
	// The control: the thread's end killed the bare child...
	bareDone := make(chan struct{})
	go func() { bare.Wait(); close(bareDone) }()
	within(t, bareDone, 10*time.Second, "the bare child's death with its thread")
	if ws := bare.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("bare child exited %v, want SIGKILL", bare.ProcessState)
	}
	// ...and the same signal would have reached the Process's by now.
	select {
	case <-p.Done():
		t.Fatalf("the Process died with the thread that started it: %v", p.ProcessState())
	case <-time.After(200 * time.Millisecond):
	}
}

func TestAwait(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p := start(t, nil, "/bin/sleep", "60")
	if err := p.Await(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	gone := start(t, nil, "/bin/sh", "-c", "exit 1")
	srv.Close()
	if err := gone.Await(context.Background(), srv.URL); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Await of an exited child: %v", err)
	}
}

// onEndingThread runs f on a goroutine locked to a thread other than the
// main one (which Go never ends), lets the goroutine return locked so the
// thread ends, and returns the thread's ID.
func onEndingThread(t *testing.T, f func()) int {
	t.Helper()
	// Holding this goroutine's thread keeps the new goroutine off it (it
	// would run there next, and this may be the main thread).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range 100 {
		tid := make(chan int)
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == os.Getpid() {
				runtime.UnlockOSThread()
				tid <- 0
				return
			}
			f()
			tid <- syscall.Gettid()
		}()
		if id := <-tid; id != 0 {
			return id
		}
	}
	t.Fatal("no thread but the main one")
	return 0
}

// awaitGone polls until path no longer exists.
func awaitGone(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	t.Fatalf("%s still there after 10s", path)
}

// awaitState polls until process pid is in state (/proc/pid/stat).
func awaitState(t *testing.T, pid int, state byte) {
	t.Helper()
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// "pid (comm) S ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == state {
			return
		}
	}
	t.Fatalf("process %d not in state %c after 10s", pid, state)
}
