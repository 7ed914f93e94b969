package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/pkg/sftp"
)

// ErrNotEmpty means a directory PutDir was to make is there already and
// holds something.
var ErrNotEmpty = errors.New("is not empty")

// DirState is what is at a path on the host: nothing, an empty
// directory, a directory with entries, or something else.
type DirState int

// The states of a path, as Dir reports them.
const (
	DirAbsent DirState = iota
	DirEmpty
	DirNotEmpty
	DirNotADir
)

// Dir reports what is at p on the host.
func (c *Conn) Dir(ctx context.Context, p string) (DirState, error) {
	out, err := c.Run(ctx, fmt.Sprintf(`p=%s
if [ ! -e "$p" ] && [ ! -L "$p" ]; then echo absent
elif [ -L "$p" ] || [ ! -d "$p" ]; then echo other
elif [ -n "$(ls -A "$p")" ]; then echo full
else echo empty; fi`, Quote(p)))
	if err != nil {
		return 0, err
	}
	switch strings.TrimSpace(out) {
	case "absent":
		return DirAbsent, nil
	case "empty":
		return DirEmpty, nil
	case "full":
		return DirNotEmpty, nil
	case "other":
		return DirNotADir, nil
	}
	return 0, fmt.Errorf("%s: what is at %s: unexpected answer %q", c.t.Host, p, out)
}

// PutDir copies the local directory src to dst on the host, directories
// 0700 and files 0600 (the modes etcd keeps its data directory in), each
// file synced to disk. It fills a sibling temporary directory and renames
// it onto dst, so dst is never seen half written; the rename replaces
// only a dst that is absent or empty, so a directory that holds anything,
// even something written while the copy ran, is refused (ErrNotEmpty)
// and left as it was. dst must not be a mount point (a rename cannot
// replace one). Cancelling ctx ends the copy: it runs on its own SFTP
// session, closed when ctx ends.
func (c *Conn) PutDir(ctx context.Context, src, dst string) (err error) {
	sc, err := sftp.NewClient(c.client, sftp.UseConcurrentWrites(true), sftp.MaxConcurrentRequestsPerFile(64))
	if err != nil {
		return fmt.Errorf("%s: sftp: %w", c.t.Host, err)
	}
	defer sc.Close()
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	defer stop()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%s: copy %s: %w (%v)", c.t.Host, dst, ctx.Err(), err)
		}
	}()

	parent := path.Dir(dst)
	if err := sc.MkdirAll(parent); err != nil {
		return fmt.Errorf("%s: mkdir %s: %w", c.t.Host, parent, err)
	}
	tmp := fmt.Sprintf("%s.lockplane-%d", dst, time.Now().UnixNano())
	defer func() {
		if err != nil {
			// Best effort, on a fresh session: sc may be the one ctx closed.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			c.Run(cctx, "rm -rf "+Quote(tmp))
		}
	}()
	err = filepath.WalkDir(src, func(local string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, local)
		if err != nil {
			return err
		}
		remote := path.Join(tmp, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			if err := sc.Mkdir(remote); err != nil {
				return fmt.Errorf("mkdir %s: %w", remote, err)
			}
			return sc.Chmod(remote, 0o700)
		case d.Type().IsRegular():
			return putFile(sc, local, remote)
		}
		return fmt.Errorf("%s is neither a directory nor a regular file", local)
	})
	if err != nil {
		return fmt.Errorf("%s: copy %s to %s: %w", c.t.Host, src, tmp, err)
	}
	if err := sc.PosixRename(tmp, dst); err != nil {
		if fi, serr := sc.Lstat(dst); serr == nil && fi.IsDir() {
			return fmt.Errorf("%s: %s %w: refusing to replace it (%v)", c.t.Host, dst, ErrNotEmpty, err)
		}
		return fmt.Errorf("%s: rename %s onto %s: %w", c.t.Host, tmp, dst, err)
	}
	// The rename is durable once the parent directory is synced.
	if _, err := c.Run(ctx, "sync "+Quote(parent)); err != nil {
		return fmt.Errorf("%s: sync %s: %w", c.t.Host, parent, err)
	}
	return nil
}

// putFile writes one new file (it must not exist), 0600, and syncs it.
func putFile(sc *sftp.Client, local, remote string) error {
	in, err := os.Open(local)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := sc.OpenFile(remote, os.O_CREATE|os.O_EXCL|os.O_WRONLY)
	if err != nil {
		return fmt.Errorf("create %s: %w", remote, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", remote, err)
	}
	if _, err := f.ReadFrom(in); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", remote, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", remote, err)
	}
	return f.Close()
}
