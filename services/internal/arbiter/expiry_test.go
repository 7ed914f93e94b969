package arbiter_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestHelperHolderProcess is not a test: it is the holder process that
// TestCrashedClientSessionExpiryReleasesAllHolds starts and kills.
func TestHelperHolderProcess(t *testing.T) {
	path := os.Getenv("LOCKPLANE_HOLDER_PROFILE")
	if path == "" {
		t.Skip("helper process only")
	}
	p, err := profile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	src, err := p.Source("demo")
	if err != nil {
		t.Fatal(err)
	}
	c, err := lockclient.Dial(lockclient.Config{Target: p.Endpoint, Identity: src, ServerID: p.ServerID})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := c.Session(ctx, devenvtest.Fast.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range strings.Split(os.Getenv("LOCKPLANE_HOLDER_KEYS"), ",") {
		if _, err := s.TryLock(ctx, k, func(*lockclient.Hold) {}); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("HELD")
	select {}
}

func TestCrashedClientSessionExpiryReleasesAllHolds(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	var keys []string
	for i := 0; i < 5; i++ {
		keys = append(keys, fmt.Sprintf("team-a/crash/%d", i))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolderProcess$")
	cmd.Env = append(os.Environ(), "LOCKPLANE_HOLDER_PROFILE="+env.ProfilePath, "LOCKPLANE_HOLDER_KEYS="+strings.Join(keys, ","))
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "HELD") {
	}
	got, err := env.Etcd.Get(ctx, lockkey.HoldPrefix+"team-a/crash/", clientv3.WithPrefix())
	if err != nil || len(got.Kvs) != len(keys) {
		t.Fatalf("holder holds %d keys (err %v), want %d", len(got.Kvs), err, len(keys))
	}
	// The crash: no CloseSession, no release, no further keepalive.
	cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	cmd.Wait()

	w := env.Etcd.Watch(ctx, lockkey.HoldPrefix+"team-a/crash/", clientv3.WithPrefix(), clientv3.WithRev(got.Header.Revision+1))
	deletedAt := map[string]int64{}
	for len(deletedAt) < len(keys) {
		select {
		case wr := <-w:
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					deletedAt[string(ev.Kv.Key)] = ev.Kv.ModRevision
				}
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d holds released by the session's expiry", len(deletedAt), len(keys))
		}
	}
	revs := map[int64]bool{}
	for _, r := range deletedAt {
		revs[r] = true
	}
	if len(revs) != 1 {
		t.Fatalf("holds were deleted at revisions %v, want one committed entry", revs)
	}
	t.Logf("all %d holds released in one entry %s after the holder was killed (TTL %s)", len(keys), time.Since(killed).Round(10*time.Millisecond), devenvtest.Fast.TTL)
}
