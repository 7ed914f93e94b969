package fsync_test

import (
	"encoding/json"
	"os/exec"
	"sort"
	"testing"

	"github.com/lockplane/lockplane/services/fsync"
)

func TestRunTimesEveryWrite(t *testing.T) {
	dir := t.TempDir()
	var progress []int64
	r, err := fsync.Run(dir, fsync.Config{Size: 230_000, Progress: func(done, _ int64) { progress = append(progress, done) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Writes != 100 || r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.Max {
		t.Fatalf("result: %+v", r)
	}
	if len(progress) != 10 || progress[9] != 230_000 {
		t.Fatalf("progress: %v", progress)
	}
	if r.Device == "" || r.Device == "unknown" {
		t.Fatalf("device of %s: %q", dir, r.Device)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	if _, err := fsync.Run("/nonexistent/dir", fsync.Config{}); err == nil {
		t.Fatal("a missing directory was accepted")
	}
	if _, err := fsync.Run(t.TempDir(), fsync.Config{Size: 10, Block: 2300}); err == nil {
		t.Fatal("a size under one block was accepted")
	}
}

// BenchmarkAgainstFio runs this package and fio's etcd recipe on the same
// directory, taking turns, each on a fresh file (fio --unlink=1; etcd
// starts each WAL segment as a new file), and reports the median p99 of each over the
// iterations (go test -bench AgainstFio -benchtime 5x ./services/fsync,
// or make bench-fsync).
func BenchmarkAgainstFio(b *testing.B) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		b.Skip("fio is not installed (apt-get install fio)")
	}
	dir := b.TempDir()
	var ours, theirs []float64
	for i := 0; i < b.N; i++ {
		r, err := fsync.Run(dir, fsync.Config{})
		if err != nil {
			b.Fatal(err)
		}
		out, err := exec.Command(fio, "--name=etcd", "--directory="+dir, "--rw=write", "--ioengine=sync", "--fdatasync=1",
			"--size=22m", "--bs=2300", "--unlink=1", "--output-format=json").Output()
		if err != nil {
			b.Fatal(err)
		}
		var res struct {
			Jobs []struct {
				Sync struct {
					LatNs struct {
						Percentile map[string]float64 `json:"percentile"`
					} `json:"lat_ns"`
				} `json:"sync"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
			b.Fatalf("fio output: %v", err)
		}
		fioP99 := res.Jobs[0].Sync.LatNs.Percentile["99.000000"] / 1e6
		ours, theirs = append(ours, r.P99ms), append(theirs, fioP99)
		b.Logf("round %d: ours p50 %.3f p99 %.3f max %.3f ms | fio p99 %.3f ms", i+1, r.P50ms, r.P99ms, r.MaxMs, fioP99)
	}
	mo, mf := median(ours), median(theirs)
	b.ReportMetric(mo, "ours-p99-ms")
	b.ReportMetric(mf, "fio-p99-ms")
	b.ReportMetric(mo/mf, "ours/fio")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
