package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/latency"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/spf13/cobra"
)

// promotion is the record of a stack that met its acquire-latency gate.
type promotion struct {
	At        time.Time `json:"at"`
	Ops       int       `json:"ops"`
	P50Ms     float64   `json:"acquire_p50_ms"`
	P99Ms     float64   `json:"acquire_p99_ms"`
	MaxMs     float64   `json:"acquire_max_ms"`
	GateP99Ms float64   `json:"gate_p99_ms"`
	Pass      bool      `json:"pass"`
}

// ErrGate is a stack whose acquire p99 is over its gate.
var ErrGate = errors.New("acquire p99 is over the stack's gate")

func promoteCmd() *cobra.Command {
	var ops int
	var class string
	var gateOverride float64
	var prefix string
	c := stackVerb("promote", "Benchmark acquire latency through the stack's arbiter and record the promotion if p99 is within the gate",
		`promote takes --ops locks (each a fresh key under --prefix, acquired then
released, one after another on one session) through the deployed arbiter
with the stack's demo identity, and compares the acquire p99 with the
stack's gates.acquireP99Ms. Within the gate it records the promotion as the
stack tag lockplane:promotion and as the stack output "promotion" (through
the stack's lockplane:promotion config and an up that changes no resource).
Over the gate it exits 1 with the figures and records nothing.`,
		func(ctx context.Context, s auto.Stack, root string, f *stackFlags) (summary, error) {
			if ops < 20 {
				return summary{}, fmt.Errorf("--ops: %d must be at least 20 for a p99", ops)
			}
			out, err := s.Outputs(ctx)
			if err != nil {
				return summary{}, err
			}
			gate, _ := out["acquireP99GateMs"].Value.(float64)
			if gateOverride > 0 {
				gate = gateOverride
			}
			path, err := writeProfile(root, f.stack, out)
			if err != nil || path == "" {
				return summary{}, fmt.Errorf("stack %s has no deployed arbiter: run `lockplane up --stack %s` first", f.stack, f.stack)
			}
			p, err := measureAcquire(ctx, path, class, prefix, ops, gate, f.output == "text")
			if err != nil {
				return summary{}, err
			}
			rec, _ := json.Marshal(p)
			if f.output == "json" {
				json.NewEncoder(os.Stdout).Encode(p)
			} else {
				fmt.Printf("acquire through %s: p50 %.3f ms, p99 %.3f ms, max %.3f ms over %d ops; gate p99 %.3f ms: %s\n",
					f.stack, p.P50Ms, p.P99Ms, p.MaxMs, p.Ops, p.GateP99Ms, map[bool]string{true: "PASS", false: "FAIL"}[p.Pass])
			}
			if !p.Pass {
				return summary{}, fmt.Errorf("%w: %.3f ms > %.3f ms; the stack is not promoted", ErrGate, p.P99Ms, p.GateP99Ms)
			}
			if err := s.SetTag(ctx, "lockplane:promotion", string(rec)); err != nil {
				return summary{}, fmt.Errorf("record the promotion tag: %w", err)
			}
			if err := s.SetConfig(ctx, "lockplane:promotion", auto.ConfigValue{Value: string(rec)}); err != nil {
				return summary{}, fmt.Errorf("record the promotion config: %w", err)
			}
			res, err := s.Up(ctx, optup.ProgressStreams(f.progress()))
			if err != nil {
				return summary{}, fmt.Errorf("record the promotion output: %w", err)
			}
			return summary{Result: "promoted", Changes: changes(res.Summary.ResourceChanges), Promotion: &p}, nil
		})
	c.Flags().IntVar(&ops, "ops", 200, "acquisitions to time")
	c.Flags().StringVar(&class, "class", "", "lock class to acquire in (default: the arbiter's default class)")
	c.Flags().StringVar(&prefix, "prefix", "demo/promote/", "key prefix to lock under: the stack's policy set must grant it to the demo identity")
	c.Flags().Float64Var(&gateOverride, "gate-p99-ms", 0, "use this gate instead of the stack's gates.acquireP99Ms (a tighter bar for a canary)")
	return c
}

// measureAcquire times acquisitions through the arbiter of a profile.
func measureAcquire(ctx context.Context, path, class, prefix string, ops int, gate float64, progress bool) (promotion, error) {
	p, err := profile.Load(path)
	if err != nil {
		return promotion{}, err
	}
	c, err := lockclient.DialProfile(p, "demo")
	if err != nil {
		return promotion{}, err
	}
	defer c.Close(context.Background())
	s, err := c.Session(ctx, class)
	if err != nil {
		return promotion{}, fmt.Errorf("open a session on %s: %w", p.Endpoint, err)
	}
	run := fmt.Sprintf("%s%d", prefix, time.Now().UnixNano())
	var lat []time.Duration
	for i := -10; i < ops; i++ { // ten warm-up acquisitions first
		t0 := time.Now()
		h, err := s.Lock(ctx, fmt.Sprintf("%s/%d", run, i+10), func(*lockclient.Hold) {})
		d := time.Since(t0)
		if err != nil {
			return promotion{}, fmt.Errorf("acquire %d: %w", i, err)
		}
		if err := h.Release(ctx); err != nil {
			return promotion{}, fmt.Errorf("release %d: %w", i, err)
		}
		if i >= 0 {
			lat = append(lat, d)
		}
		if progress && (i+1)%50 == 0 {
			fmt.Fprintf(os.Stderr, "\r%d/%d acquisitions", i+1, ops)
		}
	}
	if progress {
		fmt.Fprintln(os.Stderr)
	}
	sum := latency.Summarize(lat)
	r := promotion{At: time.Now().UTC(), Ops: ops, P50Ms: sum.P50ms, P99Ms: sum.P99ms, MaxMs: sum.MaxMs, GateP99Ms: gate}
	r.Pass = gate > 0 && r.P99Ms <= gate
	return r, nil
}
