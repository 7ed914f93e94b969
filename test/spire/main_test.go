// Package spire_test locks with identities from a real SPIRE server and agent.
//
// Its SVIDs are short enough to rotate several times during one session:
// a session and its hold outlive every SVID they started with.
package spire_test

import (
	"os"
	"testing"

	"github.com/lockplane/lockplane/test/arbiterproc"
)

// bins are the arbiter and etcd built for this run: the arbiter's own
// path is the selector of its registration entry.
var bins arbiterproc.Bins

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spire-bin-")
	if err != nil {
		panic(err)
	}
	if bins, err = arbiterproc.Build(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
