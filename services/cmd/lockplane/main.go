// Command lockplane is the distribution's operator command. `lockplane dev`
// runs the embedded default; the infrastructure verbs (up, preview, destroy,
// bench, promote) join it as they land.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "lockplane",
		Short:         "Stand up and run the Lockplane lock service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(devCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lockplane:", err)
		os.Exit(1)
	}
}
