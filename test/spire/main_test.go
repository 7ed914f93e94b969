// Package spire_test runs the arbiter and a client on identities from a
// real SPIRE server and agent, with SVIDs short enough to rotate several
// times during one session: a session and its hold outlive every SVID
// they started with.
package spire_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockplane/lockplane/test/gate/cluster"
)

// arbiterBin and etcdBin are the arbiter and etcd built for this run: the
// arbiter's own path is the selector of its registration entry.
var arbiterBin, etcdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spire-bin-")
	if err != nil {
		panic(err)
	}
	arbiterBin = filepath.Join(dir, "arbiter")
	if out, err := exec.Command("go", "build", "-o", arbiterBin, "github.com/lockplane/lockplane/services/cmd/arbiter").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build the arbiter: %v\n%s", err, out))
	}
	if etcdBin, err = cluster.BuildEtcd(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
