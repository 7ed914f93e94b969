// Command lockplane-images builds the OCI image layouts of what Lockplane
// deploys: for each image, a static binary by `go build` in the product
// module, then a FROM SCRATCH image written to OUT/NAME as an OCI image
// layout, read back and validated. It prints each image's name and manifest
// digest, one per line, or with -json one JSON object per image.
//
// Run from the images module: go run ./cmd/lockplane-images -root ..
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/lockplane/lockplane/images"
)

// target is one image: its name and the main package of its binary.
type target struct {
	Name, Package string
}

// targets are the images, in the order they are built and printed.
var targets = []target{
	{"arbiter", "./services/cmd/arbiter"},
	{"lockplane-node", "./services/cmd/lockplane-node"},
	{"etcd", "./services/cmd/etcd"},
}

// result is what -json prints for one image.
type result struct {
	Name   string `json:"name"`
	Layout string `json:"layout"`
	Digest string `json:"digest"`
}

func main() {
	root := flag.String("root", "..", "the product module's directory")
	out := flag.String("out", "", "where the layouts go (default ROOT/.lockplane/images)")
	revision := flag.String("revision", "", "the commit, recorded as the org.opencontainers.image.revision label")
	goarch := flag.String("arch", runtime.GOARCH, "the architecture to build for")
	asJSON := flag.Bool("json", false, "print one JSON object per image")
	flag.Parse()
	if *out == "" {
		*out = filepath.Join(*root, ".lockplane", "images")
	}
	enc := json.NewEncoder(os.Stdout)
	for _, t := range targets {
		r, err := build(*root, *out, *revision, *goarch, t)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockplane-images:", err)
			os.Exit(1)
		}
		if *asJSON {
			_ = enc.Encode(r)
		} else {
			fmt.Printf("%-15s %s\n", r.Name, r.Digest)
		}
	}
}

func build(root, out, revision, goarch string, t target) (result, error) {
	bin, err := filepath.Abs(filepath.Join(out, "bin", t.Name))
	if err != nil {
		return result{}, err
	}
	if err := images.GoBuild(root, t.Package, bin, "linux", goarch); err != nil {
		return result{}, err
	}
	labels := map[string]string{"org.opencontainers.image.source": "https://github.com/lockplane/lockplane"}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	img, err := images.Image(images.Spec{
		Name: t.Name, Binary: bin, Path: "usr/bin/" + t.Name,
		Labels: labels, OS: "linux", Arch: goarch,
	})
	if err != nil {
		return result{}, err
	}
	dir := filepath.Join(out, t.Name)
	digest, err := images.WriteLayout(dir, t.Name, img)
	if err != nil {
		return result{}, err
	}
	if err := images.Verify(dir, digest); err != nil {
		return result{}, err
	}
	return result{Name: t.Name, Layout: dir, Digest: digest.String()}, nil
}
