package arbiter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reads batched together are one Txn that etcd serves as a read: no Raft
// entry, and each read gets its own range.
func TestGroupReadsAreOneReadOnlyTxnEachAnsweredItsOwnRange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	const n = 40
	for i := range n {
		for j := range i%3 + 1 {
			if _, err := cli.Put(ctx, fmt.Sprintf("p%d/%d", i, j), "v"); err != nil {
				t.Fatal(err)
			}
		}
	}
	g := newGroupRead(cli)
	later := time.Now().Add(10 * time.Second)
	for i := range n {
		prefix := fmt.Sprintf("p%d/", i)
		g.queue = append(g.queue, &subTxn{key: prefix, deadline: later, done: make(chan struct{}), width: 1,
			then: []clientv3.Op{clientv3.OpGet(prefix, clientv3.WithPrefix())}})
	}
	before, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	batch := g.take(time.Now())
	if len(batch) != n {
		t.Fatalf("a batch of %d reads, want %d", len(batch), n)
	}
	g.send(batch)
	after, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if after.RaftIndex != before.RaftIndex {
		t.Errorf("a batch of reads added %d Raft entries: etcd proposed it as a write", after.RaftIndex-before.RaftIndex)
	}
	for i, s := range batch {
		if s.err != nil {
			t.Fatalf("%s: %v", s.key, s.err)
		}
		kvs := s.resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) != i%3+1 {
			t.Fatalf("%s read %d keys, want %d", s.key, len(kvs), i%3+1)
		}
		for _, kv := range kvs {
			if want := fmt.Sprintf("p%d/", i); string(kv.Key[:len(want)]) != want {
				t.Fatalf("%s was answered with %s", s.key, kv.Key)
			}
		}
	}
}

// heldAnswer lets the first Txn reach etcd, then holds its answer until
// release is closed; executed is closed once etcd has served it.
type heldAnswer struct {
	Etcd
	held              atomic.Bool
	executed, release chan struct{}
}

func (h *heldAnswer) Txn(ctx context.Context) clientv3.Txn {
	txn := h.Etcd.Txn(ctx)
	if !h.held.CompareAndSwap(false, true) {
		return txn
	}
	return &heldTxn{Txn: txn, h: h}
}

type heldTxn struct {
	clientv3.Txn
	h *heldAnswer
}

func (t *heldTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *heldTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *heldTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *heldTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	close(t.h.executed)
	<-t.h.release
	return resp, err
}

// A read asked while a read of the same range is in flight is not answered
// by it: it sees a write committed after that read was served and before
// it was asked. Answering both from one Txn (a single flight) would let a
// renewal miss a shard lease another arbiter had just recorded.
func TestAGroupReadIsNeverAnsweredByATxnSentBeforeIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	held := &heldAnswer{Etcd: cli, executed: make(chan struct{}), release: make(chan struct{})}
	g := newGroupRead(held)
	// One in flight, so that the second read queues while the first's Txn
	// is in flight: the case the property is about.
	g.inflight = 1
	get := func() chan *clientv3.GetResponse {
		out := make(chan *clientv3.GetResponse, 1)
		go func() {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := g.get(octx, "s/", clientv3.OpGet("s/", clientv3.WithPrefix()))
			if err != nil {
				t.Error(err)
			}
			out <- resp
		}()
		return out
	}
	first := get()
	<-held.executed
	if _, err := cli.Put(ctx, "s/shard-1", "7"); err != nil {
		t.Fatal(err)
	}
	second := get()
	// Let the first Txn answer only once the second read is waiting.
	for queued := 0; queued == 0; {
		time.Sleep(time.Millisecond)
		g.mu.Lock()
		queued = len(g.queue)
		g.mu.Unlock()
	}
	close(held.release)
	if r := <-first; r != nil && len(r.Kvs) != 0 {
		t.Fatalf("the first read, served before the write, saw %d keys", len(r.Kvs))
	}
	if r := <-second; r == nil || len(r.Kvs) != 1 {
		t.Fatalf("a read asked after the write was answered without it: %v", r)
	}
}

// BenchmarkShardLeaseRead compares a renewal's read of its shard lease
// records as a Get of its own with the same read through a group read,
// 16 at a time per core on one embedded member (whose work is included).
func BenchmarkShardLeaseRead(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, cli := startOne(b, ctx, etcdembed.Config{})
	const sessions = 1000
	for i := range sessions {
		if _, err := cli.Put(ctx, fmt.Sprintf("sl/%d/entity-0", i), "7"); err != nil {
			b.Fatal(err)
		}
	}
	g := newGroupRead(cli)
	for _, c := range []struct {
		name string
		read func(ctx context.Context, prefix string) error
	}{
		{"get", func(ctx context.Context, prefix string) error {
			_, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
			return err
		}},
		{"group-read", func(ctx context.Context, prefix string) error {
			_, err := g.get(ctx, prefix, clientv3.OpGet(prefix, clientv3.WithPrefix()))
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(16)
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := c.read(rctx, fmt.Sprintf("sl/%d/", next.Add(1)%sessions))
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
