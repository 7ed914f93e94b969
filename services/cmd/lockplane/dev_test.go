package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The quick start's first command, as a user runs it: serve (with its
// audit store when ClickHouse is installed), refuse a second instance
// clearly, stop on SIGINT, and ClickHouse with it.
func TestDevServesAndRefusesASecondInstance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockplane")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// dev looks for bin/minio beside itself, as `make dev` has it.
	minioBin, _ := filepath.Abs("../../../bin/minio")
	_, err := os.Stat(minioBin)
	withMinIO := err == nil && chserver.Installed()
	if withMinIO {
		os.Symlink(minioBin, filepath.Join(filepath.Dir(bin), "minio"))
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
		Audit   string   `json:"audit"`
		Archive string   `json:"archive"`
		Issuer  string   `json:"oidc_issuer"`
	}
	if err := json.Unmarshal(line.Bytes(), &ready); err != nil || ready.Arbiter == "" || len(ready.Etcd) != 3 {
		t.Fatalf("ready line %q: %v", line.Text(), err)
	}
	if (ready.Audit != "") != chserver.Installed() {
		t.Fatalf("ready line %q: audit %q with ClickHouse installed %v", line.Text(), ready.Audit, chserver.Installed())
	}
	if ready.Audit != "" {
		resp, err := http.Get(ready.Audit + "/ping")
		if err != nil {
			t.Fatalf("the audit store does not answer: %v", err)
		}
		resp.Body.Close()
	}
	if (ready.Archive != "") != withMinIO {
		t.Fatalf("ready line %q: archive %q with MinIO built (and ClickHouse installed) %v", line.Text(), ready.Archive, withMinIO)
	}
	if ready.Archive != "" {
		awaitDevArchive(t, dir, ready.Archive)
	}
	if _, err := os.Stat(ready.Profile); err != nil {
		t.Fatalf("profile: %v", err)
	}
	// The operators' provider: its discovery document, and alice's code.
	if !strings.HasPrefix(ready.Issuer, "https://127.0.0.1:") {
		t.Fatalf("ready line %q: no operators' OpenID provider", line.Text())
	}
	otp, err := exec.Command(bin, "dev", "otp", "alice", "--dir", dir).Output()
	if code := strings.TrimSpace(string(otp)); err != nil || len(code) != 6 {
		t.Fatalf("dev otp alice: %q, %v; want a 6-digit code", otp, err)
	}
	if out, err := exec.Command(bin, "dev", "otp", "mallory", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "not an operator") {
		t.Fatalf("dev otp mallory: %v: %s", err, out)
	}

	out, err := exec.Command(bin, "dev", "--dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already running") || !strings.Contains(string(out), ready.Arbiter) {
		t.Fatalf("second dev: err %v, output %q; want a refusal naming the running arbiter", err, out)
	}

	first.Process.Signal(syscall.SIGINT)
	if err := first.Wait(); err != nil {
		t.Fatalf("dev did not stop cleanly on SIGINT: %v", err)
	}
	if ready.Audit != "" {
		if resp, err := http.Get(ready.Audit + "/ping"); err == nil {
			resp.Body.Close()
			t.Fatal("ClickHouse outlived dev")
		}
	}
	if ready.Archive != "" {
		if resp, err := http.Get(ready.Archive + "/minio/health/live"); err == nil {
			resp.Body.Close()
			t.Fatal("MinIO outlived dev")
		}
	}
}

// awaitDevArchive reads dev's archive credentials under dir and waits
// until the archiver has made the records bucket, under object lock.
func awaitDevArchive(t *testing.T, dir, url string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "minio", "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	user, password, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(b)), "archive "), ":")
	cli, err := minio.New(strings.TrimPrefix(url, "http://"), &minio.Options{Creds: credentials.NewStaticV4(user, password, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		lock, _, _, _, err := cli.GetObjectLockConfig(ctx, "lockplane-records")
		if err == nil && lock == "Enabled" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dev's archive made no records bucket: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// --shards adds entity shards the arbiter routes the "entity" class to.
func TestDevWithShardsRoutesTheEntityClass(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "lockplane")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dev := exec.Command(bin, "dev", "--dir", filepath.Join(dir, "state"), "--shards", "2", "--no-audit", "-o", "json")
	stdout, _ := dev.StdoutPipe()
	dev.Stderr = os.Stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer dev.Process.Kill()
	line := bufio.NewScanner(stdout)
	if !line.Scan() {
		t.Fatal("dev printed nothing")
	}
	var ready struct {
		Profile string              `json:"profile"`
		Shards  map[string][]string `json:"entity_shards"`
		Audit   *string             `json:"audit"`
	}
	if err := json.Unmarshal(line.Bytes(), &ready); err != nil || len(ready.Shards) != 2 || ready.Audit == nil || *ready.Audit != "" {
		t.Fatalf("ready line %q: %v", line.Text(), err)
	}
	lockctl := filepath.Join(dir, "lockctl")
	if out, err := exec.Command("go", "build", "-o", lockctl, "../lockctl").CombinedOutput(); err != nil {
		t.Fatalf("build lockctl: %v\n%s", err, out)
	}
	out, err := exec.Command(lockctl, "--profile", ready.Profile, "run", "--class", "entity", "team-a/entity/42", "--", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("lockctl run --class entity: %v\n%s", err, out)
	}
	out, err = exec.Command(lockctl, "--profile", ready.Profile, "shards").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "entity-0, entity-1") {
		t.Fatalf("lockctl shards: %v\n%s", err, out)
	}
	dev.Process.Signal(syscall.SIGINT)
	if err := dev.Wait(); err != nil {
		t.Fatalf("dev did not stop cleanly on SIGINT: %v", err)
	}
}
