package pausetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/fence"
)

// The holder protocol: JSON lines, commands on the holder's stdin, events
// on its stdout. Tokens never cross it.
type command struct {
	Op     string `json:"op"` // acquire | write | open
	Key    string `json:"key,omitempty"`
	Class  string `json:"class,omitempty"`
	Record string `json:"record,omitempty"`
	Value  string `json:"value,omitempty"`
	Gate   int    `json:"gate,omitempty"`
}

type event struct {
	Ev     string `json:"ev"` // ready | acquired | gated | wrote | error
	Writes int    `json:"writes,omitempty"`
	Stale  bool   `json:"stale,omitempty"`
	Error  string `json:"error,omitempty"`
}

// HolderConfig is what a holder process is started with.
type HolderConfig struct {
	Kind, Target string
	// Profile and Identity say how the holder reaches the arbiter.
	Profile, Identity string
}

// HolderEnv carries HolderConfig to a holder process.
const HolderEnv = "LOCKPLANE_PAUSETEST_HOLDER"

// HolderMain runs a holder: the process the kit freezes. It serves the
// protocol on stdin and stdout until stdin closes.
func HolderMain(ctx context.Context, cfg HolderConfig, in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	emit := func(e event) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(e)
		fmt.Fprintln(out, string(b))
	}
	kind, err := Lookup(cfg.Kind)
	if err != nil {
		return err
	}
	g := &gate{}
	res, err := kind.Open(ctx, cfg.Target, g.dial)
	if err != nil {
		return fmt.Errorf("open %s: %w", cfg.Kind, err)
	}
	defer res.Close()
	p, err := profile.Load(cfg.Profile)
	if err != nil {
		return err
	}
	c, err := lockclient.DialProfile(p, cfg.Identity)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	emit(event{Ev: "ready"})

	var hold *lockclient.Hold
	writes := make(chan struct{}, 1)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var cmd command
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			emit(event{Ev: "error", Error: "bad command: " + err.Error()})
			continue
		}
		switch cmd.Op {
		case "acquire":
			s, err := c.Session(ctx, cmd.Class)
			if err == nil {
				// A paused holder does not know it was fenced: it writes
				// anyway, which is what the resource must refuse.
				hold, err = s.Lock(ctx, cmd.Key, func(*lockclient.Hold) {})
			}
			if err != nil {
				emit(event{Ev: "error", Error: err.Error()})
				continue
			}
			emit(event{Ev: "acquired"})
		case "write":
			if hold == nil {
				emit(event{Ev: "error", Error: "write before acquire"})
				continue
			}
			g.arm(cmd.Gate, func() { emit(event{Ev: "gated"}) })
			// The write runs aside so that "open" can be read while it is
			// stopped at the gate.
			writes <- struct{}{}
			go func(cmd command, tok uint64) {
				defer func() { <-writes }()
				err := res.Write(ctx, hold.Token(), cmd.Record, cmd.Value)
				e := event{Ev: "wrote", Writes: g.count(), Stale: errors.Is(err, fence.ErrStaleFence)}
				if err != nil && !e.Stale {
					e.Error = err.Error()
				}
				emit(e)
			}(cmd, uint64(hold.Token()))
		case "open":
			g.release()
		default:
			emit(event{Ev: "error", Error: "unknown op " + cmd.Op})
		}
	}
	return sc.Err()
}

// HolderFromEnv runs HolderMain if this process was started as a holder
// (HolderEnv set), and reports whether it was.
func HolderFromEnv() (bool, error) {
	v := os.Getenv(HolderEnv)
	if v == "" {
		return false, nil
	}
	var cfg HolderConfig
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		return true, fmt.Errorf("%s: %w", HolderEnv, err)
	}
	return true, HolderMain(context.Background(), cfg, os.Stdin, os.Stdout)
}
