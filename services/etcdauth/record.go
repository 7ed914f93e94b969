package etcdauth

import (
	"bytes"
	"context"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Use is one key range a request reads or writes: a range read, a put, a
// delete, or a Txn's compare (a read). End is "" for one key and "\x00"
// for every key from Key on, as etcd has them.
type Use struct {
	Op       string // "range", "put", "delete" or "compare"
	Key, End string
}

// Writes reports whether the use needs write access.
func (u Use) Writes() bool { return u.Op == "put" || u.Op == "delete" }

// Allows reports whether the role grants what u needs, as etcd decides
// it: a range needs one or more of the role's ranges of that access to
// cover all of it. (A put with a lease needs write on the lease's other
// keys too, and a lease revoke or keepalive on all of them; those are
// etcd's to check: a recorder cannot see a lease's keys.)
func (r Role) Allows(u Use) bool { return allows(r.Perms, u) }

// Allows reports whether the user's roles together grant what u needs.
func (s Spec) Allows(user string, u Use) bool {
	var perms []Perm
	for _, usr := range s.Users {
		if usr.Name != user {
			continue
		}
		for _, name := range usr.Roles {
			if r, ok := s.Role(name); ok {
				perms = append(perms, r.Perms...)
			}
		}
	}
	return allows(perms, u)
}

func allows(perms []Perm, u Use) bool {
	// Intervals [start, end) of the access needed; end nil is +inf.
	type ivl struct{ start, end []byte }
	var have []ivl
	for _, p := range perms {
		if u.Writes() && p.Access == Read || !u.Writes() && p.Access == Write {
			continue
		}
		k, e := p.keyRange()
		switch {
		case e == "":
			have = append(have, ivl{[]byte(k), append([]byte(k), 0)})
		case e == "\x00":
			have = append(have, ivl{[]byte(k), nil})
		default:
			have = append(have, ivl{[]byte(k), []byte(e)})
		}
	}
	want := ivl{[]byte(u.Key), append([]byte(u.Key), 0)}
	switch {
	case u.End == "\x00":
		want.end = nil
	case u.End != "":
		want.end = []byte(u.End)
	}
	// Sweep the granted intervals in start order, extending the covered
	// prefix of want until it is all covered or a gap shows.
	slices.SortFunc(have, func(a, b ivl) int { return bytes.Compare(a.start, b.start) })
	at := want.start
	for _, h := range have {
		if bytes.Compare(h.start, at) > 0 {
			break // a gap before h
		}
		if h.end == nil {
			return true
		}
		if bytes.Compare(h.end, at) > 0 {
			at = h.end
		}
		if want.end != nil && bytes.Compare(at, want.end) >= 0 {
			return true
		}
	}
	return false
}

// Recorder is a clientv3.KV that passes every request on and records the
// key ranges each reads and writes, a Txn's compares and both branches'
// ops included, whichever runs (as etcd checks them). A test runs a path
// through it and holds the record against the path's role with
// Spec.Allows, or against a narrower rule (the Admin API deletes only
// under /l/ and /q/).
type Recorder struct {
	clientv3.KV
	mu   sync.Mutex
	uses []Use
}

// NewRecorder records the requests sent to kv.
func NewRecorder(kv clientv3.KV) *Recorder { return &Recorder{KV: kv} }

// Uses are the recorded uses, in order.
func (r *Recorder) Uses() []Use {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.uses)
}

func (r *Recorder) note(us ...Use) {
	r.mu.Lock()
	r.uses = append(r.uses, us...)
	r.mu.Unlock()
}

// Put implements clientv3.KV.
func (r *Recorder) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	r.note(opUses(clientv3.OpPut(key, val, opts...))...)
	return r.KV.Put(ctx, key, val, opts...)
}

// Get implements clientv3.KV.
func (r *Recorder) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	r.note(opUses(clientv3.OpGet(key, opts...))...)
	return r.KV.Get(ctx, key, opts...)
}

// Delete implements clientv3.KV.
func (r *Recorder) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	r.note(opUses(clientv3.OpDelete(key, opts...))...)
	return r.KV.Delete(ctx, key, opts...)
}

// Do implements clientv3.KV.
func (r *Recorder) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	r.note(opUses(op)...)
	return r.KV.Do(ctx, op)
}

// Txn implements clientv3.KV.
func (r *Recorder) Txn(ctx context.Context) clientv3.Txn {
	return &recordedTxn{Txn: r.KV.Txn(ctx), r: r}
}

type recordedTxn struct {
	clientv3.Txn
	r *Recorder
}

func (t *recordedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.r.note(cmpUses(cs)...)
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *recordedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.r.note(opUses(op)...)
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *recordedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.r.note(opUses(op)...)
	}
	t.Txn = t.Txn.Else(ops...)
	return t
}

func cmpUses(cs []clientv3.Cmp) []Use {
	var out []Use
	for _, c := range cs {
		out = append(out, Use{Op: "compare", Key: string(c.Key), End: string(c.RangeEnd)})
	}
	return out
}

func opUses(op clientv3.Op) []Use {
	k, e := string(op.KeyBytes()), string(op.RangeBytes())
	switch {
	case op.IsPut():
		return []Use{{Op: "put", Key: k}}
	case op.IsDelete():
		return []Use{{Op: "delete", Key: k, End: e}}
	case op.IsGet():
		return []Use{{Op: "range", Key: k, End: e}}
	case op.IsTxn():
		cs, thens, elses := op.Txn()
		out := cmpUses(cs)
		for _, o := range append(thens, elses...) {
			out = append(out, opUses(o)...)
		}
		return out
	}
	return nil
}
