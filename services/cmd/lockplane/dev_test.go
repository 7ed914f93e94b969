package main_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The quick start's first command, as a user runs it: serve, refuse a
// second instance clearly, stop on SIGINT.
func TestDevServesAndRefusesASecondInstance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockplane")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	first := exec.Command(bin, "dev", "--dir", dir, "-o", "json")
	stdout, _ := first.StdoutPipe()
	first.Stderr = os.Stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	line := bufio.NewScanner(stdout)
	if !line.Scan() {
		t.Fatal("dev printed nothing")
	}
	var ready struct {
		Arbiter string   `json:"arbiter"`
		Profile string   `json:"profile"`
		Etcd    []string `json:"etcd"`
	}
	if err := json.Unmarshal(line.Bytes(), &ready); err != nil || ready.Arbiter == "" || len(ready.Etcd) != 3 {
		t.Fatalf("ready line %q: %v", line.Text(), err)
	}
	if _, err := os.Stat(ready.Profile); err != nil {
		t.Fatalf("profile: %v", err)
	}

	out, err := exec.Command(bin, "dev", "--dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already running") || !strings.Contains(string(out), ready.Arbiter) {
		t.Fatalf("second dev: err %v, output %q; want a refusal naming the running arbiter", err, out)
	}

	first.Process.Signal(syscall.SIGINT)
	if err := first.Wait(); err != nil {
		t.Fatalf("dev did not stop cleanly on SIGINT: %v", err)
	}
}
