package childproc

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// waitDelay bounds the reaper's wait for a child's output pipes once it
// has exited (exec.Cmd.WaitDelay).
const waitDelay = 10 * time.Second

// Process is a child process this process runs and reaps.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has exited and been reaped
}

// Option changes how Start runs a child.
type Option func(*options)

type options struct{ pdeathsig syscall.Signal }

// SurviveParent leaves the child running if this process dies without
// stopping it, as the gate's and the tests' children always have: without
// it the kernel SIGKILLs the child when its parent dies (Pdeathsig). A
// Pdeathsig the caller set in cmd.SysProcAttr is kept either way.
func SurviveParent() Option { return func(o *options) { o.pdeathsig = 0 } }

// Start starts cmd (its output already directed; SysProcAttr kept) and
// reaps it in the background. A child's output must not be read through
// cmd.StdoutPipe or StderrPipe, which the reaping closes at exit, losing
// unread lines: use an os.Pipe.
func Start(cmd *exec.Cmd, opts ...Option) (*Process, error) {
	o := options{pdeathsig: syscall.SIGKILL}
	for _, f := range opts {
		f(&o)
	}
	if o.pdeathsig != 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		if cmd.SysProcAttr.Pdeathsig == 0 { // a caller's own choice stands
			cmd.SysProcAttr.Pdeathsig = o.pdeathsig
		}
	}
	if cmd.WaitDelay == 0 {
		// A grandchild still holding the child's output pipe (or a child
		// stuck in the kernel) must not keep Kill, Stop and Done waiting
		// for ever: the reaper gives up on the pipes after this.
		cmd.WaitDelay = waitDelay
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the parent THREAD exits, not the process
		// (go.dev/issue/27505), and Go ends a thread whenever a goroutine
		// locked to it returns. Forking from a thread held, locked, until
		// the child is reaped means only this process's death kills it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Pid is the child's process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// ProcessState is how the child exited, or nil while it runs.
func (p *Process) ProcessState() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Signal sends sig to the child; os.ErrProcessDone once it has exited.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill kills the child, frozen (SIGSTOP) or not, and returns once it has
// exited. SIGCONT first, as the gate's kills always did: Linux ends a
// stopped process on SIGKILL as well, but this does not depend on it.
func (p *Process) Kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.done
}

// Stop asks the child to shut down (SIGTERM), kills it if it has not
// within grace, and returns once it has exited.
func (p *Process) Stop(grace time.Duration) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.Wait(grace)
}

// Wait waits up to d for the child to exit by itself, then kills it; it
// reports whether the child exited without being killed.
func (p *Process) Wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.Kill()
		return false
	}
}
