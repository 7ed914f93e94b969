// Command lockplane is the distribution's operator command. `lockplane dev`
// runs the embedded default; the infrastructure verbs (up, preview, destroy,
// bench, promote) join it as they land.
package main

import (
	"fmt"
	"os"

	"github.com/lockplane/lockplane/benchmarks/fsync"
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
	root.AddCommand(devCmd(), bench, upCmd(), previewCmd(), refreshCmd(), destroyCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lockplane:", err)
		os.Exit(1)
	}
}
