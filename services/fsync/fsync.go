// Package fsync measures a disk the way etcd uses it: etcd's fio recipe
// (sequential 2300-byte writes, an fdatasync after each, 22 MiB), timing
// every fdatasync. A member's commit latency is its WAL fdatasync, so the
// p99 here is the floor of every grant's latency on that disk (ADR-06).
package fsync

import (
	"bufio"
	"errors"

	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/latency"
	"golang.org/x/sys/unix"
)

// Config shapes a run; the zero value is etcd's recipe.
type Config struct {
	// Size is the bytes written in all; 22 MiB when zero.
	Size int64
	// Block is the bytes per write; 2300 when zero.
	Block int
	// Progress, if set, is called after every 10% of the run.
	Progress func(done, total int64)
}

// Result is the distribution of fdatasync latencies.
type Result struct {
	Dir    string        `json:"dir"`
	Device string        `json:"device"`
	Writes int           `json:"writes"`
	P50    time.Duration `json:"-"`
	P99    time.Duration `json:"-"`
	Max    time.Duration `json:"-"`
	P50ms  float64       `json:"p50_ms"`
	P99ms  float64       `json:"p99_ms"`
	MaxMs  float64       `json:"max_ms"`
}

// String prints the result for a person.
func (r Result) String() string {
	return fmt.Sprintf("fdatasync on %s (%s): %d writes, p50 %s, p99 %s, max %s", r.Dir, r.Device, r.Writes, r.P50, r.P99, r.Max)
}

// Run writes and syncs a scratch file in dir, then removes it.
func Run(dir string, cfg Config) (Result, error) {
	if cfg.Size == 0 {
		cfg.Size = 22 << 20
	}
	if cfg.Block == 0 {
		cfg.Block = 2300
	}
	if cfg.Size < int64(cfg.Block) || cfg.Block <= 0 {
		return Result{}, fmt.Errorf("fsync: size %d and block %d: the size must hold at least one block", cfg.Size, cfg.Block)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return Result{}, fmt.Errorf("fsync: --dir: %w", err)
	}
	if !st.IsDir() {
		return Result{}, fmt.Errorf("fsync: --dir: %s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".lockplane-fsync-*")
	if err != nil {
		return Result{}, fmt.Errorf("fsync: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// etcd preallocates its WAL segments (and fio lays its file out first),
	// so an fdatasync carries the data alone, not a size change.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, cfg.Size); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return Result{}, fmt.Errorf("fsync: preallocate: %w", err)
	}
	buf := make([]byte, cfg.Block)
	for i := range buf {
		buf[i] = byte(i*31 + 7)
	}
	n := int(cfg.Size / int64(cfg.Block))
	lat := make([]time.Duration, 0, n)
	step := max(n/10, 1)
	for i := 0; i < n; i++ {
		if _, err := f.Write(buf); err != nil {
			return Result{}, fmt.Errorf("fsync: write: %w", err)
		}
		t0 := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return Result{}, fmt.Errorf("fsync: fdatasync: %w", err)
		}
		lat = append(lat, time.Since(t0))
		if cfg.Progress != nil && (i+1)%step == 0 {
			cfg.Progress(int64(i+1)*int64(cfg.Block), cfg.Size)
		}
	}
	sum := latency.Summarize(lat)
	abs, _ := filepath.Abs(dir)
	r := Result{Dir: abs, Device: Device(abs), Writes: n, P50: latency.Percentile(lat, 50), P99: latency.Percentile(lat, 99), Max: lat[len(lat)-1],
		P50ms: sum.P50ms, P99ms: sum.P99ms, MaxMs: sum.MaxMs}
	return r, nil
}

// Device names the filesystem source that holds dir, from the mount table.
func Device(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, source := "", "unknown"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, rest := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(rest) < 2 {
			continue
		}
		mp := fields[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, source = mp, rest[1]
		}
	}
	return source
}
