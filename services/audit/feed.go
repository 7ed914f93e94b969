package audit

import (
	"context"
	"github.com/lockplane/lockplane/services/etcdauth"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The feed reads the log ahead of the tailer's inserts, within a bound.
//
// etcd's client buffers a watch's responses without limit until they are
// received, and a watch far behind the head is sent the log as fast as
// the server reads it. So the feed receives every response as it comes
// (the client's buffer stays empty) into a queue of its own, and counts
// what it holds: the queued responses and the batch being stored, until
// the tailer hands back what it stored. Once that reaches
// Config.MaxPendingEvents events or Config.MaxPendingBytes bytes, the feed
// cancels the watch, dropping whatever the client had not handed over
// yet; once half of it is handed back, it watches again from the
// revision after the last one it queued. etcd never splits a revision
// across a watch's responses, so each window ends on a whole revision and
// the next starts at the one after: no revision is skipped, and none
// read twice. The checkpoint passes only what the store has, as before.
//
// So while catching up the tailer holds at most the bound plus one watch
// response (etcd sends at most 1000 revisions in one), whatever the
// backlog.

// item is one watch response as the feed queued it; ok is false once the
// watch's channel has closed.
type item struct {
	resp clientv3.WatchResponse
	ok   bool
	cost cost
}

// cost is what some watch responses hold: events, and bytes of keys and
// values (current and previous).
type cost struct{ events, bytes int64 }

func (c *cost) add(d cost) { c.events += d.events; c.bytes += d.bytes }
func (c *cost) sub(d cost) { c.events -= d.events; c.bytes -= d.bytes }

func costOf(resp clientv3.WatchResponse) cost {
	c := cost{events: int64(len(resp.Events))}
	for _, ev := range resp.Events {
		if ev.Kv != nil {
			c.bytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
		}
		if ev.PrevKv != nil {
			c.bytes += int64(len(ev.PrevKv.Key) + len(ev.PrevKv.Value))
		}
	}
	return c
}

// unbounded reports whether the configuration turns the bound off (a
// negative MaxPendingEvents: only to measure what the bound saves).
func (t *tailer) unbounded() bool { return t.cfg.MaxPendingEvents < 0 }

// full reports whether c has reached the bound; half, whether it is at
// or past half of it.
func (t *tailer) full(c cost) bool {
	return !t.unbounded() && (c.events >= t.cfg.MaxPendingEvents || c.bytes >= t.cfg.MaxPendingBytes)
}

func (t *tailer) half(c cost) bool {
	return !t.unbounded() && (2*c.events >= t.cfg.MaxPendingEvents || 2*c.bytes >= t.cfg.MaxPendingBytes)
}

// feed watches the log from revision from until ctx ends, sending each
// response on out in order. freed takes back the cost of what the tailer
// stored. A response that ends the watch (an error, a compaction, the
// channel's close) is the last sent.
func (t *tailer) feed(ctx context.Context, from int64, out chan<- item, freed <-chan cost) {
	var (
		held  cost // queued, and sent but not yet handed back
		queue []item
		wch   clientv3.WatchChan // nil while paused or ended
		stop  = func() {}
		next  = from // the first revision not queued
		ended bool
	)
	defer func() { stop(); t.cfg.Metrics.held(t.cfg.Cluster, 0) }()
	watch := func() {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		stop = cancel
		wch = t.cfg.Etcd.Watch(etcdauth.WatchContext(wctx), "/", clientv3.WithPrefix(), clientv3.WithRev(next),
			clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	}
	pause := func() { stop(); stop, wch = func() {}, nil }
	watch()
	for {
		var send chan<- item
		var head item
		if len(queue) > 0 {
			send, head = out, queue[0]
		}
		select {
		case <-ctx.Done():
			return
		case send <- head:
			queue[0] = item{}
			queue = queue[1:]
		case c := <-freed:
			held.sub(c)
			t.cfg.Metrics.held(t.cfg.Cluster, held.events)
			if wch == nil && !ended && !t.half(held) {
				watch()
			}
		case resp, ok := <-wch:
			it := item{resp: resp, ok: ok, cost: costOf(resp)}
			held.add(it.cost)
			t.cfg.Metrics.held(t.cfg.Cluster, held.events)
			queue = append(queue, it)
			if !ok || resp.Canceled || resp.CompactRevision > 0 || resp.Err() != nil {
				ended = true
				pause()
				continue
			}
			t.cfg.Metrics.head(t.cfg.Cluster, resp.Header.Revision)
			if resp.IsProgressNotify() {
				next = max(next, resp.Header.Revision+1)
			} else if n := len(resp.Events); n > 0 {
				next = max(next, resp.Events[n-1].Kv.ModRevision+1)
			}
			if t.full(held) {
				pause()
			}
		}
	}
}
