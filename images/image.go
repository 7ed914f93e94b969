package images

import (
	"fmt"
	"maps"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user every image runs as: 65532, the uid and gid
// distroless calls nonroot, so no image runs as root by default.
const NonRoot = "65532:65532"

// Spec is everything an image is made of. Two equal Specs over equal binary
// bytes make images with equal digests.
type Spec struct {
	// Name is the image's name in its layout (arbiter, lockplane-node,
	// etcd); it is recorded as the org.opencontainers.image.ref.name
	// annotation, not in the image, so it does not change the digest.
	Name string
	// Binary is the static binary on disk.
	Binary string
	// Path is where the binary goes in the image, such as
	// usr/bin/arbiter; the Entrypoint is /Path.
	Path string
	// Args are the default arguments (the config's Cmd); may be empty.
	Args []string
	// Labels are the config's labels, such as
	// org.opencontainers.image.source; values must not vary between
	// builds of the same inputs (no timestamps).
	Labels map[string]string
	// OS and Arch are the platform the binary was built for.
	OS, Arch string

	layer layerOptions
}

// Image builds the image spec describes, in memory.
func Image(spec Spec) (v1.Image, error) {
	if spec.Path == "" || path.IsAbs(spec.Path) {
		return nil, fmt.Errorf("image %s: path %q must be relative, such as usr/bin/%s", spec.Name, spec.Path, spec.Name)
	}
	if spec.OS == "" || spec.Arch == "" {
		return nil, fmt.Errorf("image %s: os and arch are required (the platform the binary was built for)", spec.Name)
	}
	l, err := layer([]File{{Path: spec.Path, Source: spec.Binary, Mode: 0o755}}, spec.layer)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	cfg := &v1.ConfigFile{
		Architecture: spec.Arch,
		OS:           spec.OS,
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{"/" + spec.Path},
			Cmd:        spec.Args,
			User:       NonRoot,
			Labels:     maps.Clone(spec.Labels), // encoding/json writes keys sorted
			WorkingDir: "/",
		},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	// Append after ConfigFile: Append adds the layer's diff ID and this
	// history entry to the config set above.
	return mutate.Append(img, mutate.Addendum{
		Layer:     l,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "lockplane images: COPY " + spec.Name + " /" + spec.Path,
		},
	})
}
