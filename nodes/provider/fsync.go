package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lockplane/lockplane/nodes/remote"
)

// FsyncBenchmarkInputs runs the fsync benchmark on a host's data disk and
// fails when its p99 is over the gate, before anything that depends on the
// disk is created (ADR-06).
type FsyncBenchmarkInputs struct {
	Connection remote.Target `json:"connection"`
	// HostName names the host in messages.
	HostName string `json:"hostName"`
	// Binary is lockplane-node on the host.
	Binary    string  `json:"binary"`
	Dir       string  `json:"dir"`
	SizeMiB   int     `json:"sizeMiB"`
	GateP99Ms float64 `json:"gateP99Ms"`
	// Run is a label: change it to run the benchmark again.
	Run string `json:"run,omitempty"`
}

// benchResult is what `lockplane-node bench fsync -o json` prints.
type benchResult struct {
	Dir    string  `json:"dir"`
	Device string  `json:"device"`
	Writes int     `json:"writes"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func init() {
	register("FsyncBenchmark", spec[FsyncBenchmarkInputs]{
		Validate: func(in *FsyncBenchmarkInputs) error {
			if err := in.Connection.Validate(); err != nil {
				return err
			}
			if err := validatePath("binary", in.Binary); err != nil {
				return err
			}
			if err := validatePath("dir", in.Dir); err != nil {
				return err
			}
			if in.SizeMiB < 1 {
				return fmt.Errorf("sizeMiB: %d must be at least 1 (etcd's recipe is 22)", in.SizeMiB)
			}
			if in.GateP99Ms <= 0 {
				return fmt.Errorf("gateP99Ms: %v must be positive", in.GateP99Ms)
			}
			if in.HostName == "" {
				return errors.New("hostName: is required")
			}
			return nil
		},
		Create: func(ctx context.Context, env *Env, in *FsyncBenchmarkInputs) (string, map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return "", nil, err
			}
			out, err := c.Run(ctx, fmt.Sprintf("mkdir -p %[1]s\n%[2]s bench fsync --dir %[1]s --size-mib %[3]d -o json",
				remote.Quote(in.Dir), remote.Quote(in.Binary), in.SizeMiB))
			if err != nil {
				return "", nil, fmt.Errorf("fsync benchmark on %s: %w", in.HostName, err)
			}
			var r benchResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				return "", nil, fmt.Errorf("fsync benchmark on %s: unreadable result %q: %v", in.HostName, out, err)
			}
			if r.P99ms > in.GateP99Ms {
				return "", nil, fmt.Errorf("fsync gate: host %s, disk %s (%s): p99 %.3f ms is over the stack's gate of %g ms (p50 %.3f ms, max %.3f ms, %d writes); etcd will not be installed on it",
					in.HostName, r.Device, r.Dir, r.P99ms, in.GateP99Ms, r.P50ms, r.MaxMs, r.Writes)
			}
			return in.HostName + ":" + in.Dir, map[string]any{"device": r.Device, "p50Ms": r.P50ms, "p99Ms": r.P99ms, "maxMs": r.MaxMs, "writes": r.Writes}, nil
		},
	})
}
