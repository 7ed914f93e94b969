package arbiter

import (
	"runtime"
	"testing"
	"time"
)

// A function never waits for a busy worker, and one run after another
// reuses the worker that ran the last, so its grown stack is not grown
// again; workers end once idle.
func TestWorkersRunAtOnceAndAreReused(t *testing.T) {
	base := runtime.NumGoroutine()
	w := newWorkers(time.Hour)
	release, started := make(chan struct{}), make(chan struct{}, 2)
	for range 2 {
		w.run(func() { started <- struct{}{}; <-release })
	}
	// The second ran beside the first, which is still busy.
	<-started
	<-started
	close(release)
	done := make(chan struct{})
	for range 100 {
		w.run(func() { done <- struct{}{} })
		<-done
	}
	// A worker that has answered may not be back waiting when the next
	// run comes, which then starts another: a few, never one per run.
	if n := runtime.NumGoroutine() - base; n > 10 {
		t.Fatalf("%d goroutines after 2 at once and 100 one after another, want the 2 workers and a few", n)
	}

	idle := newWorkers(time.Millisecond)
	base = runtime.NumGoroutine()
	ended := make(chan struct{})
	idle.run(func() { close(ended) })
	<-ended
	// The worker's idle timer is the event; nothing exposes it.
	for give := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; runtime.Gosched() {
		if time.Now().After(give) {
			t.Fatalf("%d goroutines more than before, 10 s after the idle worker's last run", runtime.NumGoroutine()-base)
		}
	}
}
