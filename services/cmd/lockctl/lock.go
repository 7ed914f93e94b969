package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type lockFlags struct {
	class string
	wait  time.Duration
}

func (l *lockFlags) register(c *cobra.Command, defaultWait time.Duration, waitHelp string) {
	c.Flags().StringVar(&l.class, "class", "", "lock class (default: the platform default)")
	c.Flags().DurationVar(&l.wait, "wait", defaultWait, waitHelp)
}

// take opens a session and acquires key, waiting up to l.wait (0: try
// once; negative: until interrupted).
func take(ctx context.Context, c *lockclient.Client, key string, l lockFlags, onFence func(*lockclient.Hold)) (*lockclient.Hold, error) {
	s, err := c.Session(ctx, l.class)
	if err != nil {
		return nil, err
	}
	if l.wait == 0 {
		return s.TryLock(ctx, key, onFence)
	}
	// Held: say by whom, then queue. A person watching a silent command
	// cannot tell a wait from a hang. A read, so no attempt jumps the queue.
	waitingFor(ctx, c, key, l)
	wctx := ctx
	if l.wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, l.wait)
		defer cancel()
	}
	for {
		h, err := s.Lock(wctx, key, onFence)
		if err == nil {
			return h, nil
		}
		timedOut := reason.Of(err) == lockv1.ErrorReason_CONTENDED || status.Code(err) == codes.DeadlineExceeded
		if !timedOut || ctx.Err() != nil {
			return nil, err
		}
		// The arbiter caps one wait; keep waiting until our own deadline.
		if d, ok := wctx.Deadline(); !ok || time.Until(d) > 0 {
			continue
		}
		return nil, exitErr{exitContended, fmt.Errorf("%s: still held by another session after %s", key, l.wait)}
	}
}

// waitingFor tells stderr that key is held and by whom, when Inspect says
// so; the holder may be gone by the time it prints.
func waitingFor(ctx context.Context, c *lockclient.Client, key string, l lockFlags) {
	r, err := c.Inspect(ctx, key, l.class)
	if err != nil || !r.GetHeld() {
		return
	}
	limit := "until interrupted"
	if l.wait > 0 {
		limit = "up to " + l.wait.String()
	}
	h := r.GetHolder()
	fmt.Fprintf(os.Stderr, "lockctl: %s is held by %s (session %d); waiting %s\n", key, h.GetIdentity(), h.GetSessionId(), limit)
}

func contended(err error) error {
	if reason.Of(err) == lockv1.ErrorReason_CONTENDED {
		return exitErr{exitContended, err}
	}
	return err
}

func runCmd(g *globals) *cobra.Command {
	var l lockFlags
	var grace time.Duration
	c := &cobra.Command{
		Use:   "run KEY -- COMMAND [ARGS...]",
		Short: "Run a command while holding KEY; its fencing token is in $LOCKPLANE_TOKEN",
		Long: `run takes KEY, runs COMMAND with LOCKPLANE_KEY and LOCKPLANE_TOKEN set, and
releases KEY when COMMAND exits. If the lock is lost (keepalives fail until
the local deadline, which precedes the lease's expiry at etcd), COMMAND gets
SIGTERM, then SIGKILL after --kill-after, and lockctl exits 4.
Exit status: COMMAND's, or 3 if KEY was not acquired, 4 if it was lost.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, argv := args[0], args[1:]
			if cmd.ArgsLenAtDash() != 1 {
				return fmt.Errorf("usage: lockctl run KEY -- COMMAND [ARGS...]")
			}
			return g.until(func(ctx context.Context, c *lockclient.Client) error {
				return run(ctx, g, c, key, argv, l, grace)
			})
		},
	}
	l.register(c, -1, "how long to wait for KEY (0: try once; default: until interrupted)")
	c.Flags().DurationVar(&grace, "kill-after", 10*time.Second, "after a lost lock, SIGKILL the command this long after SIGTERM")
	return c
}

// run holds key while argv runs. Once the child has started, signals are
// forwarded to it instead of ending lockctl.
func run(ctx context.Context, g *globals, c *lockclient.Client, key string, argv []string, l lockFlags, grace time.Duration) error {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	lost := make(chan struct{})
	h, err := take(ctx, c, key, l, func(*lockclient.Hold) { close(lost) })
	if err != nil {
		return contended(err)
	}
	child.Env = append(os.Environ(), "LOCKPLANE_KEY="+key, "LOCKPLANE_TOKEN="+strconv.FormatUint(uint64(h.Token()), 10))
	if err := child.Start(); err != nil {
		h.Release(context.Background())
		return exitErr{exitError, fmt.Errorf("start %s: %w", argv[0], err)}
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	wasLost := false
	var kill <-chan time.Time
	var werr error
wait:
	for {
		select {
		case werr = <-done:
			break wait
		case s := <-sigs:
			syscall.Kill(-child.Process.Pid, s.(syscall.Signal))
		case <-lost:
			lost, wasLost = nil, true
			fmt.Fprintf(os.Stderr, "lockctl: lock on %s lost (keepalives failed until the deadline, or two operators force-released it); sending SIGTERM\n", key)
			syscall.Kill(-child.Process.Pid, syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	if rerr := h.Release(rctx); rerr != nil && !wasLost {
		fmt.Fprintf(os.Stderr, "lockctl: release %s: %v\n", key, rerr)
	}
	if wasLost {
		return exitErr{exitLost, fmt.Errorf("lock on %s was lost while the command ran", key)}
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		return exitErr{ee.ExitCode(), errSilent}
	}
	return werr
}

func acquireCmd(g *globals) *cobra.Command {
	var l lockFlags
	var hold time.Duration
	c := &cobra.Command{
		Use:   "acquire KEY",
		Short: "Take KEY and hold it until interrupted (or for --hold)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			return g.until(func(ctx context.Context, c *lockclient.Client) error { return acquire(ctx, g, c, key, l, hold) })
		},
	}
	l.register(c, 0, "how long to wait for KEY (default: try once)")
	c.Flags().DurationVar(&hold, "hold", 0, "release after this long (default: hold until interrupted)")
	return c
}

func acquire(ctx context.Context, g *globals, c *lockclient.Client, key string, l lockFlags, hold time.Duration) error {
	lost := make(chan struct{})
	h, err := take(ctx, c, key, l, func(*lockclient.Hold) { close(lost) })
	if err != nil {
		return contended(err)
	}
	t := h.Token()
	if g.json() {
		printJSON(map[string]any{"key": key, "token": map[string]any{"value": uint64(t), "epoch": t.Epoch(), "revision": t.Revision()}, "class": l.class})
	} else {
		fmt.Printf("acquired %s\n  token  %d (epoch %d, revision %d)\nholding until interrupted; Ctrl-C releases\n", key, uint64(t), t.Epoch(), t.Revision())
	}
	var until <-chan time.Time
	if hold > 0 {
		until = time.After(hold)
	}
	select {
	case <-ctx.Done():
	case <-until:
	case <-lost:
		return exitErr{exitLost, fmt.Errorf("lock on %s lost: keepalives failed until the deadline", key)}
	}
	rctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	if err := h.Release(rctx); err != nil {
		return err
	}
	if !g.json() {
		fmt.Printf("released %s\n", key)
	}
	return nil
}
