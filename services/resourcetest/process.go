package resourcetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockplane/lockplane/services/childproc"
)

// logTail is how much of a process's log a failed test prints.
const logTail = 8000

// StartLogged starts cmd with its output in a new file at logPath. The
// process is killed when the test ends, and the end of its log printed if
// the test failed.
func StartLogged(t testing.TB, cmd *exec.Cmd, logPath string) *childproc.Process {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	// SurviveParent: as these children always ran; the cleanup kills them.
	p, err := childproc.Start(cmd, childproc.SurviveParent())
	log.Close() // the child has its own descriptor
	if err != nil {
		t.Fatalf("start %s: %v", filepath.Base(cmd.Path), err)
	}
	t.Cleanup(func() {
		p.Kill()
		if !t.Failed() {
			return
		}
		if out, err := os.ReadFile(logPath); err == nil {
			if len(out) > logTail {
				out = out[len(out)-logTail:]
			}
			t.Logf("%s:\n%s", filepath.Base(logPath), out)
		}
	})
	return p
}
