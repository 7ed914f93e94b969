// Command lockplane is the distribution's operator command: `lockplane dev`
// runs the embedded default; up, preview, refresh and destroy drive a
// region's stack; bench fsync measures a disk; promote gates a stack on
// its acquire latency.
package main

import (
	"fmt"
	"os"

	"github.com/lockplane/lockplane/services/fsync"
	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "lockplane",
		Short:         "Stand up and run the Lockplane lock service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	bench := &cobra.Command{Use: "bench", Short: "Benchmarks that gate a deployment"}
	bench.AddCommand(fsync.Command())
	root.AddCommand(devCmd(), bench, upCmd(), previewCmd(), refreshCmd(), destroyCmd(), promoteCmd(), snapshotCmd(), drCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lockplane:", err)
		os.Exit(1)
	}
}
