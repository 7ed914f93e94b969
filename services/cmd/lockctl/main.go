// Command lockctl is the operator's and script's client of Lockplane: take a
// lock around a command, inspect a key, read the cluster's status. Every
// command prints short human output, or JSON with -o json.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/pausetest"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
)

// Exit codes, for scripts.
const (
	exitError     = 1
	exitUsage     = 2
	exitContended = 3 // the lock was not acquired in time
	exitLost      = 4 // run: the lock was lost while the command ran
)

// exitErr carries an exit code out of a command.
type exitErr struct {
	code int
	err  error
}

func (e exitErr) Error() string { return e.err.Error() }

// errSilent exits with a code and prints nothing: run passing on its
// command's exit status.
var errSilent = errors.New("")

func main() {
	// The pause test starts this binary again as its frozen holder.
	if isHolder, err := pausetest.HolderFromEnv(); isHolder {
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockctl pausetest holder:", err)
			os.Exit(exitError)
		}
		os.Exit(0)
	}
	g := &globals{}
	root := &cobra.Command{
		Use:           "lockctl",
		Short:         "Take, inspect and administer Lockplane locks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.register(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitErr{exitUsage, err} })
	root.AddCommand(runCmd(g), acquireCmd(g), inspectCmd(g), statusCmd(g), auditCmd(g), reportCmd(g), epochCmd(g), forceReleaseCmd(g), loginCmd(g), logoutCmd(g), shardsCmd(g), pausetestCmd(g), policyCmd(g))
	if err := root.Execute(); err != nil {
		code := exitError
		var ee exitErr
		if errors.As(err, &ee) {
			code = ee.code
			err = ee.err
		}
		if !errors.Is(err, errSilent) {
			report(g, err)
		}
		os.Exit(code)
	}
}

// report prints an error for a person, or as JSON on stdout with -o json.
func report(g *globals, err error) {
	st, _ := status.FromError(err)
	r, meta := reason.Info(err)
	if g.json() {
		out := map[string]any{"error": map[string]any{"message": st.Message(), "code": st.Code().String(), "reason": r.String(), "metadata": meta}}
		printJSON(out)
		return
	}
	msg := st.Message()
	if r != 0 {
		msg += fmt.Sprintf(" (%s)", r)
	}
	fmt.Fprintln(os.Stderr, "lockctl:", msg)
}
