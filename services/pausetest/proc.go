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
)

// holderProc is a running holder process and its protocol.
type holderProc struct {
	cmd    *exec.Cmd
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
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &holderProc{cmd: cmd, in: in, events: make(chan event, 16), stderr: &tail{}}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder %s: %w", command[0], err)
	}
	go func() {
		defer close(h.events)
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

func (h *holderProc) freeze() error { return h.cmd.Process.Signal(syscall.SIGSTOP) }
func (h *holderProc) thaw() error   { return h.cmd.Process.Signal(syscall.SIGCONT) }

func (h *holderProc) kill() {
	h.cmd.Process.Signal(syscall.SIGCONT)
	h.cmd.Process.Kill()
	h.in.Close()
	h.cmd.Wait()
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
