package images

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// refName is the annotation OCI tools read an image's name from in a
// layout's index.json.
const refName = "org.opencontainers.image.ref.name"

// WriteLayout replaces dir with an OCI image layout holding only img, named
// name, and returns img's manifest digest: the digest index.json lists, and
// the one any tool that copies the layout to a registry keeps. The layout is
// written fresh each time so no blob of an earlier build lingers in it.
func WriteLayout(dir, name string, img v1.Image) (v1.Hash, error) {
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{refName: name}),
		layout.WithPlatform(v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture}))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("layout %s: %w", dir, err)
	}
	return img.Digest()
}

// Verify reads the layout at dir back from disk and checks it: index.json
// lists exactly one manifest, with digest want, and that image validates
// (every blob present, every digest and diff ID matching its bytes).
func Verify(dir string, want v1.Hash) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want {
		return fmt.Errorf("layout %s: index.json must list exactly one manifest, %s", dir, want)
	}
	img, err := idx.Image(want)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if err := validate.Image(img); err != nil {
		return fmt.Errorf("layout %s: image %s does not validate: %w", dir, want, err)
	}
	return nil
}
