package provider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"github.com/lockplane/lockplane/nodes/remote"
)

// FileInputs is a file on a host: inline content, or a local file sent
// with its declared SHA-256 (so a rebuilt binary is a visible change).
type FileInputs struct {
	Connection remote.Target `json:"connection"`
	Path       string        `json:"path"`
	Content    *string       `json:"content,omitempty"`
	Source     string        `json:"source,omitempty"`
	Sha256     string        `json:"sourceSha256,omitempty"`
	Mode       string        `json:"mode,omitempty"`
}

func (f *FileInputs) mode() os.FileMode {
	m, err := strconv.ParseUint(f.Mode, 8, 32)
	if err != nil || f.Mode == "" {
		return 0o644
	}
	return os.FileMode(m)
}

func (f *FileInputs) body() (io.ReadSeeker, string, func(), error) {
	if f.Content != nil {
		sum := sha256.Sum256([]byte(*f.Content))
		return bytes.NewReader([]byte(*f.Content)), hex.EncodeToString(sum[:]), func() {}, nil
	}
	r, err := os.Open(f.Source)
	if err != nil {
		return nil, "", nil, fmt.Errorf("source: %w", err)
	}
	return r, f.Sha256, func() { r.Close() }, nil
}

func validatePath(field, p string) error {
	if p == "" || !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%s: %q must be an absolute, clean path", field, p)
	}
	return nil
}

// SumFile is the hex SHA-256 of a local file: what a program declares as a
// File's sha256.
func SumFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func init() {
	put := func(ctx context.Context, env *Env, in *FileInputs) (map[string]any, error) {
		c, err := env.Pool.Dial(ctx, in.Connection)
		if err != nil {
			return nil, err
		}
		body, sum, done, err := in.body()
		if err != nil {
			return nil, err
		}
		defer done()
		if _, err := c.Put(ctx, in.Path, body, sum, in.mode()); err != nil {
			return nil, err
		}
		return map[string]any{"sha256": sum}, nil
	}
	register("File", spec[FileInputs]{
		Validate: func(in *FileInputs) error {
			if err := in.Connection.Validate(); err != nil {
				return err
			}
			if err := validatePath("path", in.Path); err != nil {
				return err
			}
			if (in.Content == nil) == (in.Source == "") {
				return errors.New("content, source: exactly one must be set")
			}
			if in.Source != "" {
				if len(in.Sha256) != 64 {
					return errors.New("sourceSha256: the source's hex SHA-256 is required with source")
				}
				if _, err := os.Stat(in.Source); err != nil {
					return fmt.Errorf("source: %v", err)
				}
			}
			if in.Mode != "" {
				if m, err := strconv.ParseUint(in.Mode, 8, 32); err != nil || m > 0o7777 {
					return fmt.Errorf("mode: %q must be octal permissions such as 0644", in.Mode)
				}
			}
			return nil
		},
		Create: func(ctx context.Context, env *Env, in *FileInputs) (string, map[string]any, error) {
			out, err := put(ctx, env, in)
			return in.Connection.Host + ":" + in.Path, out, err
		},
		Read: func(ctx context.Context, env *Env, _ string, in *FileInputs, st map[string]any) (map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return nil, err
			}
			sum, err := c.Sha256(ctx, in.Path)
			if err != nil || sum == "" {
				return nil, err
			}
			st["sha256"] = sum
			return st, nil
		},
		Update: func(ctx context.Context, env *Env, _ string, _, news *FileInputs, _ map[string]any) (map[string]any, error) {
			return put(ctx, env, news)
		},
		Delete: func(ctx context.Context, env *Env, _ string, in *FileInputs, _ map[string]any) error {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return err
			}
			_, err = c.Run(ctx, "rm -f "+remote.Quote(in.Path))
			return err
		},
		Replaces: []string{"connection", "path"},
	})
}
