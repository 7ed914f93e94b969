package resourcetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// logTail is how much of a process's log a failed test prints.
const logTail = 8000

// StartLogged starts cmd with its output in a new file at logPath. The
// process is killed when the test ends, and the end of its log printed if
// the test failed.
func StartLogged(t testing.TB, cmd *exec.Cmd, logPath string) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", filepath.Base(cmd.Path), err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
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
}
