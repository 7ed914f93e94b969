package arbiter

import "time"

// workers runs functions on goroutines that outlive them: one that has
// just run a function takes the next, with the stack it grew (until a GC
// halves an idle one), and ends once idle for a while. Any number run at
// once; none waits for a worker.
//
// KeepAlive streams run their renewals here. A stream's own goroutine
// lives as long as its session, so the stack a renewal's etcd calls grow
// (16 KB) must not stay with it; a goroutine per renewal would grow that
// stack afresh every time.
type workers struct {
	handoff chan func()
	idle    time.Duration
}

func newWorkers(idle time.Duration) *workers {
	return &workers{handoff: make(chan func()), idle: idle}
}

// run runs f on an idle worker, or on a new one when none is idle.
func (w *workers) run(f func()) {
	select {
	case w.handoff <- f:
	default:
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(w.idle)
		select {
		case f = <-w.handoff:
		case <-t.C:
			return
		}
	}
}

// workerIdle is how long a renewal worker waits for the next renewal:
// past a renewal interval of the shortest TTL (ADR-11's range starts at
// 5 s), so a steady load keeps its workers.
const workerIdle = 5 * time.Second
