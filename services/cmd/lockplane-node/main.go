// Command lockplane-node is the small binary the infrastructure program
// puts on every host it manages, for the checks that must run on the host
// itself: the fsync benchmark of an etcd member's data disk, and the
// readiness probes a Service runs after it starts (probe http, probe tcp).
package main

import (
	"fmt"
	"os"

	"github.com/lockplane/lockplane/services/fsync"
	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{Use: "lockplane-node", Short: "Host-side checks of a Lockplane node", SilenceUsage: true, SilenceErrors: true}
	bench := &cobra.Command{Use: "bench", Short: "Benchmarks of this host"}
	bench.AddCommand(fsync.Command())
	root.AddCommand(bench, probeCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lockplane-node:", err)
		os.Exit(1)
	}
}
