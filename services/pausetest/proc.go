package pausetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/childproc"
)

// holderProc is a running holder process and its protocol.
type holderProc struct {
	proc   *childproc.Process
	in     io.WriteCloser
	events chan event
	stderr *tail
}

func startHolder(ctx context.Context, command []string, cfg HolderConfig) (*holderProc, error) {
	env, _ := json.Marshal(cfg)
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Env = append(os.Environ(), HolderEnv+"="+string(env))
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// An os.Pipe, not StdoutPipe: the Process reaps the holder as it
	// exits, and Wait would close a StdoutPipe before its last events are
	// read.
	out, w, err := os.Pipe()
	if err != nil {
		in.Close()
		return nil, err
	}
	h := &holderProc{in: in, events: make(chan event, 16), stderr: &tail{}}
	cmd.Stdout, cmd.Stderr = w, h.stderr
	// SurviveParent: as the holder always ran; the kit kills it.
	h.proc, err = childproc.Start(cmd, childproc.SurviveParent())
	w.Close() // the child has its own descriptor
	if err != nil {
		in.Close()
		out.Close()
		return nil, fmt.Errorf("start holder %s: %w", command[0], err)
	}
	go func() {
		defer close(h.events)
		defer out.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				h.events <- e
			}
		}
	}()
	if _, err := h.expect("ready", 30*time.Second); err != nil {
		h.kill()
		return nil, err
	}
	return h, nil
}

func (h *holderProc) send(c command) error {
	b, _ := json.Marshal(c)
	_, err := h.in.Write(append(b, '\n'))
	return err
}

// expect waits for the next event, which must be ev.
func (h *holderProc) expect(ev string, timeout time.Duration) (event, error) {
	select {
	case e, ok := <-h.events:
		if !ok {
			return event{}, fmt.Errorf("holder exited: %s", h.stderr)
		}
		if e.Ev == "error" {
			return e, fmt.Errorf("holder: %s", e.Error)
		}
		if e.Ev != ev {
			return e, fmt.Errorf("holder said %q, expected %q", e.Ev, ev)
		}
		return e, nil
	case <-time.After(timeout):
		return event{}, fmt.Errorf("holder did not say %q within %s", ev, timeout)
	}
}

func (h *holderProc) freeze() error { return h.proc.Signal(syscall.SIGSTOP) }
func (h *holderProc) thaw() error   { return h.proc.Signal(syscall.SIGCONT) }

func (h *holderProc) kill() {
	h.proc.Kill()
	h.in.Close()
}

// tail keeps the last few KiB of a holder's stderr for error messages.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
