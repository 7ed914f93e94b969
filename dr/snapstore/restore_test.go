package snapstore_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/restore"
	"github.com/lockplane/lockplane/dr/snapshot"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcd derives a cluster ID from the token and the peer URLs alone: a
// restore under the snapshotted cluster's own token and URLs would come
// back with its ID, and the epoch record bound to that ID would serve
// unsealed. Such a restore is refused; one under a new token is not.
func TestARestoreThatWouldKeepTheClusterIDIsRefused(t *testing.T) {
	ctx, c, _ := region(t)
	file := filepath.Join(t.TempDir(), "coord.db")
	m, err := snapshot.Take(ctx, snapshot.Source{Region: "local", Cluster: snapshot.CoordCluster,
		Config: clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
	if err != nil {
		t.Fatal(err)
	}
	plan := func(token string) restore.Cluster {
		rc := restore.Cluster{Snapshot: file, Token: token}
		for _, mem := range c.Members {
			rc.Members = append(rc.Members, restore.Member{Name: mem.Name, DataDir: filepath.Join(t.TempDir(), mem.Name), PeerURL: mem.Peer})
		}
		return rc
	}
	same := plan(c.Token())
	if id, err := same.ClusterID(); err != nil || id != m.ClusterID {
		t.Fatalf("the old token and URLs derive %s (%v), want the snapshotted cluster's %s", id, err, m.ClusterID)
	}
	if err := same.All(); err == nil || !strings.Contains(err.Error(), "would serve unsealed") {
		t.Fatalf("a restore under the old token: %v, want it refused", err)
	}
	if err := plan("").All(); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("a restore with no token: %v", err)
	}
	noDir := plan("new-token")
	noDir.Members[0].DataDir = ""
	if err := noDir.All(); err == nil || !strings.Contains(err.Error(), "data dir is required") {
		t.Fatalf("a member with no data dir: %v", err)
	}
	if err := plan("new-token").All(); err != nil {
		t.Fatalf("a restore under a new token: %v", err)
	}
}
