package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every timestamp an image carries: the clock must not reach the
// digest.
var epoch = time.Unix(0, 0).UTC()

// File is one regular file of a layer: where it goes and which file on disk
// holds its bytes.
type File struct {
	// Path is the path inside the image, without a leading slash.
	Path string
	// Source is the file on disk whose contents are copied.
	Source string
	// Mode is the permission bits (0o755 for a binary).
	Mode int64
}

// layerOptions are knobs only tests turn: a real build never sets them.
type layerOptions struct {
	// keepMtime writes each file's real modification time, the mistake
	// the reproducibility test must catch.
	keepMtime bool
}

// layerTar returns the uncompressed tar of files: entries sorted by path,
// parent directories first, every header normalised (mtime epoch, uid/gid
// 0, no user or group names, the file's given mode), USTAR format so no
// PAX record adds access or change times.
func layerTar(files []File, opt layerOptions) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range sorted {
		if f.Path == "" || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("file path %q: must be relative and clean, such as usr/bin/arbiter", f.Path)
		}
		if err := writeParents(tw, dirs, path.Dir(f.Path)); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
		hdr := header(f.Path, tar.TypeReg, f.Mode)
		hdr.Size = int64(len(data))
		if opt.keepMtime {
			st, err := os.Stat(f.Source)
			if err != nil {
				return nil, err
			}
			hdr.ModTime = st.ModTime()
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeParents writes a directory entry for dir and each of its parents not
// yet written, outermost first, so a runtime extracting the layer never has
// to invent a directory (whose mode it would then choose).
func writeParents(tw *tar.Writer, done map[string]bool, dir string) error {
	if dir == "." || dir == "/" || done[dir] {
		return nil
	}
	if err := writeParents(tw, done, path.Dir(dir)); err != nil {
		return err
	}
	done[dir] = true
	return tw.WriteHeader(header(dir+"/", tar.TypeDir, 0o755))
}

func header(name string, typ byte, mode int64) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     mode,
		ModTime:  epoch,
		Uid:      0,
		Gid:      0,
		Format:   tar.FormatUSTAR,
	}
}

// layer makes the OCI layer of files: gzip-compressed by compress/gzip,
// whose output (no name, no mtime in its header) depends only on the input
// and the Go version building the builder.
func layer(files []File, opt layerOptions) (v1.Layer, error) {
	data, err := layerTar(files, opt)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
