package images

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// StaticFlags are the `go build` flags that make a binary static and
// byte-identical across builds of the same source with the same Go:
// -trimpath drops the build directory, -buildvcs=false the commit and
// dirty bit, -s -w the symbol table and DWARF, and an empty -buildid the
// one input not derived from the source.
var StaticFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}

// GoBuild builds the main package pkg of the module in dir into out as a
// static binary for goos/goarch: CGO_ENABLED=0, so no libc is needed in a
// FROM SCRATCH image.
func GoBuild(dir, pkg, out, goos, goarch string) error {
	args := append([]string{"build"}, StaticFlags...)
	args = append(args, "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = os.Stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, stderr.String())
	}
	return nil
}
