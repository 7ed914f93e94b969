package fsync

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Command is `bench fsync`, shared by the operator's lockplane command and
// the lockplane-node binary that runs it on each etcd host.
func Command() *cobra.Command {
	var dir, output string
	var sizeMiB int
	var gate float64
	c := &cobra.Command{
		Use:   "fsync",
		Short: "Measure fdatasync latency on a directory the way etcd's WAL uses it (etcd's fio recipe)",
		Long: `fsync writes --size-mib of 2300-byte blocks sequentially to a scratch file in
--dir, with an fdatasync after each, and prints p50, p99 and max of the
fdatasync latencies. Run it on an etcd member's data disk before the member
is installed: a grant waits for the slowest disk of the acknowledging
majority. With --gate-p99-ms it exits 1 when p99 is over the gate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output: %q is not text or json", output)
			}
			if sizeMiB < 1 {
				return fmt.Errorf("--size-mib: %d must be at least 1", sizeMiB)
			}
			cfg := Config{Size: int64(sizeMiB) << 20}
			if output == "text" {
				cfg.Progress = func(done, total int64) {
					fmt.Fprintf(os.Stderr, "\r%3d%% of %d MiB", done*100/total, total>>20)
				}
			}
			r, err := Run(dir, cfg)
			if output == "text" {
				fmt.Fprintln(os.Stderr)
			}
			if err != nil {
				return err
			}
			over := gate > 0 && r.P99ms > gate
			if output == "json" {
				json.NewEncoder(os.Stdout).Encode(struct {
					Result
					GateP99ms float64 `json:"gate_p99_ms,omitempty"`
					Pass      bool    `json:"pass"`
				}{r, gate, !over})
			} else {
				fmt.Println(r)
			}
			if over {
				return fmt.Errorf("p99 %.3f ms on %s (%s) is over the gate of %.3f ms", r.P99ms, r.Dir, r.Device, gate)
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", ".", "directory on the disk to measure")
	c.Flags().IntVar(&sizeMiB, "size-mib", 22, "MiB to write")
	c.Flags().Float64Var(&gate, "gate-p99-ms", 0, "fail when p99 is over this many milliseconds (0: no gate)")
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return c
}
