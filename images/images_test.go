package images

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// hello is the smallest program a static binary is built from: the test
// needs real binary bytes, not the product's, to stay fast.
const hello = `package main

func main() { println("hello") }
`

// staticHello builds hello statically with GoBuild into dir/hello.
func staticHello(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(hello), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hello")
	if err := GoBuild(src, ".", bin, "linux", runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	return bin
}

// copyWithTime copies src to dst and gives dst another modification time,
// as a rebuild on another day would.
func copyWithTime(t *testing.T, src, dst string, mtime time.Time) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// twoDigests builds one image twice, from two copies of the same binary
// that differ in mtime and permission bits on disk, writes each as a layout
// that must validate, and returns the two digests.
func twoDigests(t *testing.T, opt layerOptions) (string, string) {
	t.Helper()
	dir := t.TempDir()
	first := staticHello(t, dir)
	second := filepath.Join(dir, "hello-again")
	copyWithTime(t, first, second, time.Now().Add(-72*time.Hour))

	spec := Spec{
		Name: "hello", Path: "usr/bin/hello", OS: "linux", Arch: runtime.GOARCH,
		Labels: map[string]string{"org.opencontainers.image.source": "https://github.com/lockplane/lockplane"},
		layer:  opt,
	}
	var digests []string
	for i, bin := range []string{first, second} {
		s := spec
		s.Binary = bin
		img, err := Image(s)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "layout", string(rune('a'+i)))
		d, err := WriteLayout(out, s.Name, img)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(out, d); err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	return digests[0], digests[1]
}

// TestSameDigestTwice: the same binary bytes make the same digest, whatever
// the file's mtime or mode on disk.
func TestSameDigestTwice(t *testing.T) {
	if a, b := twoDigests(t, layerOptions{}); a != b {
		t.Fatalf("the same binary made two digests, %s and %s: something other than its bytes reached the image", a, b)
	}
}

// TestRealMtimeIsCaught: the broken variant, which keeps each file's real
// mtime, makes two digests, so TestSameDigestTwice would fail on it; it
// shows the test's two copies really differ where a careless builder looks.
func TestRealMtimeIsCaught(t *testing.T) {
	if a, b := twoDigests(t, layerOptions{keepMtime: true}); a == b {
		t.Fatalf("keeping the real mtime made one digest, %s: the test's copies do not differ in mtime", a)
	}
}

// TestConfig checks what every image promises a runtime: the binary as the
// Entrypoint, the nonroot user, and the epoch as its created time.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	img, err := Image(Spec{Name: "hello", Binary: staticHello(t, dir), Path: "usr/bin/hello", OS: "linux", Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/usr/bin/hello" {
		t.Errorf("entrypoint: %q, want [/usr/bin/hello]", got)
	}
	if cfg.Config.User != NonRoot {
		t.Errorf("user: %q, want %q", cfg.Config.User, NonRoot)
	}
	if !cfg.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("created: %v, want the Unix epoch", cfg.Created.Time)
	}
}
