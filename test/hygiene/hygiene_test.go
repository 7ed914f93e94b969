package hygiene

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// buildOutputs are the files `go build` writes for each main package of
// every module, relative to the root: the package's name-by-path in the
// module's directory (`go build ./DIR`) and in its own (`go build` there).
// A name that is a directory is left out: go build refuses to overwrite it.
func buildOutputs(t *testing.T, top string) []string {
	t.Helper()
	mods, err := exec.Command("git", "-C", top, "ls-files", "--", "go.mod", "*/go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, mod := range strings.Fields(string(mods)) {
		modDir := filepath.Join(top, filepath.Dir(mod))
		cmd := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{.Dir}}{{end}}`, "./...")
		cmd.Dir = modDir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v\n%s", modDir, err, stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			importPath, dir, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			name := exeName(importPath)
			for _, d := range []string{modDir, dir} {
				p := filepath.Join(d, name)
				if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					continue
				}
				rel, _ := filepath.Rel(top, p)
				outs = append(outs, filepath.ToSlash(rel))
			}
		}
	}
	slices.Sort(outs)
	return slices.Compact(outs)
}

// exeName is go build's default output name for a main package: the last
// element of its import path, or the one before a major version suffix.
func exeName(importPath string) string {
	elem := path.Base(importPath)
	if len(elem) > 1 && elem[0] == 'v' && strings.Trim(elem[1:], "0123456789") == "" {
		return path.Base(path.Dir(importPath))
	}
	return elem
}

// Every main package's default build output is ignored, wherever go build
// leaves it; and every entry of .gitignore's build-output block still
// names one (a stale entry hides nothing but misleads).
func TestEveryMainPackagesBuildOutputIsIgnored(t *testing.T) {
	top := root(t)
	outs := buildOutputs(t, top)
	if len(outs) == 0 {
		t.Fatal("go list found no main packages")
	}
	cmd := exec.Command("git", "-C", top, "check-ignore", "--no-index", "--stdin")
	cmd.Stdin = strings.NewReader(strings.Join(outs, "\n") + "\n")
	out, _ := cmd.Output() // exit 1: none ignored
	ignored := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		ignored[p] = true
	}
	for _, p := range outs {
		if !ignored[p] {
			t.Errorf("%s: a build output git does not ignore; add /%s (or its directory's pattern) to .gitignore", p, p)
		}
	}

	f, err := os.Open(filepath.Join(top, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "# Binaries"):
			in = true
		case !in || line == "" || strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "/"):
		default:
			if !slices.ContainsFunc(outs, func(p string) bool { ok, _ := path.Match(line[1:], p); return ok }) {
				t.Errorf(".gitignore: %s names no main package's build output; remove it", line)
			}
		}
	}
	if !in {
		t.Error(`.gitignore: no "# Binaries" block of build outputs`)
	}
}

// make hygiene fails on tracked executables and Java class files, told by
// their first bytes, and on nothing else: a text file that happens to start
// with "MZ" is not a PE executable.
func TestHygieneTellsExecutablesFromText(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("make is not installed")
		}
		t.Skip("make is not installed")
	}
	top := root(t)
	dir := t.TempDir()
	mk, err := os.ReadFile(filepath.Join(top, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	pe := make([]byte, 0x48)
	copy(pe, "MZ")
	binary.LittleEndian.PutUint32(pe[0x3c:], 0x40)
	copy(pe[0x40:], "PE\x00\x00")
	files := map[string][]byte{
		"Makefile":      mk,
		"elf":           []byte("\x7fELF\x02\x01\x01"),
		"macho64":       {0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1},
		"universal":     {0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2},
		"universal64":   {0xca, 0xfe, 0xba, 0xbf, 0, 0, 0, 2},
		"Main.class":    {0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 0x41},
		"tool.exe":      pe,
		"mz-notes.txt":  []byte("MZ is how a PE file starts; this is a note about it, long enough to have bytes at 0x3c and past them.\n"),
		"mz-short.txt":  []byte("MZ\n"),
		"README.md":     []byte("# not an executable\n"),
		"sub/dir/x.bin": pe,
	}
	want := []string{"Main.class", "elf", "macho64", "sub/dir/x.bin", "tool.exe", "universal", "universal64"}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	cmd := exec.Command("make", "-s", "hygiene")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make hygiene passed over tracked executables:\n%s", out)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if _, ok := files[line]; ok {
			got = append(got, line)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("make hygiene flagged %v, want %v:\n%s", got, want, out)
	}
}
