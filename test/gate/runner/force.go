package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/test/gate/checker"
	ghistory "github.com/lockplane/lockplane/test/gate/history"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The force-release workload and fault. Every grant is kept ForceLinger
// after its write (traffic.Config.Linger), so that a holder still uses
// the hold the operators end; the fault picks a hold at most forceYoung
// old. ForceGrace is how long after the approval the holder may still
// start work under it (checker.ForceLearned): it hears at its next
// keepalive (a third of the TTL), and no CanStart outlives a TTL without
// one.
const (
	ForceLinger = 5 * time.Second
	forceYoung  = time.Second
	ForceGrace  = TTL
	// forceTries bounds the search for a hold to release: the fault runs
	// from a quarter of the history to its heal.
	forceTries = 6 * time.Second
)

// heldKey is a hold read from etcd: what the operators are to end.
type heldKey struct {
	key      string
	session  int64
	revision int64
	since    time.Time
	client   int
}

// forceRelease is the fault: two operators force-release a hold of the
// gate class that a client holds now. It runs beside the traffic; the
// heal waits for its outcome.
func (h *history) forceRelease(ctx context.Context) func() error {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = h.force(ctx)
	}()
	return func() error { <-done; return err }
}

// force is the real flow: alice asks for the hold's release through one
// arbiter (RequestForceRelease: the request records the hold's key,
// session and revision, which the approval compares), bob approves it
// through the other (ApproveAction), and the runner records the release
// (key, session, revision, the Txn's revision, the approval's times) as
// the history's force-release op. A request whose hold changed between
// the read and the request is withdrawn; an approval refused because the
// hold changed since (ACTION_STALE) is recorded as refused; either way
// another hold is tried.
func (h *history) force(ctx context.Context) error {
	alice, bob, done, err := h.ops.pair(h.profiles)
	if err != nil {
		return err
	}
	defer done()
	var last error
	for deadline := time.Now().Add(forceTries); time.Now().Before(deadline) && ctx.Err() == nil; sleep(ctx, 50*time.Millisecond) {
		hk, ok, err := h.youngHold(ctx)
		if err != nil || !ok {
			if err != nil {
				last = err
			}
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := alice.RequestForceRelease(h.ops.as(rctx, requester), &adminv1.RequestForceReleaseRequest{Key: hk.key,
			Reason: fmt.Sprintf("gate: force-release fault (client %d's hold, still in use)", hk.client)})
		cancel()
		if err != nil {
			last = fmt.Errorf("request: %w", err)
			continue
		}
		act := r.GetAction()
		held := act.GetHold()
		if held.GetClass() != "gate" {
			return fmt.Errorf("force-release: the request names class %q, not the gate's", held.GetClass())
		}
		if held.GetRevision() != hk.revision || held.GetSession() != hk.session {
			// Released and granted again between the read and the request.
			h.withdraw(ctx, alice, act.GetId())
			last = fmt.Errorf("request %s names revision %d of session %x, not the hold read (revision %d of session %x)",
				act.GetId(), held.GetRevision(), held.GetSession(), hk.revision, hk.session)
			continue
		}
		op := ghistory.Op{Key: hk.key, Session: hk.session, Revision: hk.revision, Kind: ghistory.ForceRelease, Detail: "request " + act.GetId()}
		op.Call = ghistory.Now()
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := bob.ApproveAction(h.ops.as(actx, approver), &adminv1.ApproveActionRequest{Id: act.GetId()})
		cancel()
		op.Return = ghistory.Now()
		switch {
		case err == nil:
			fr := resp.GetForceRelease()
			if !slices.Equal(fr.GetReleased(), []string{hk.key}) {
				return fmt.Errorf("force-release: request %s released %v, not %s", act.GetId(), fr.GetReleased(), hk.key)
			}
			op.Result, op.ReleasedAt = ghistory.OK, fr.GetRevision()
			h.ops.record(op)
			return nil
		case reason.Of(err) == lockv1.ErrorReason_ACTION_STALE:
			// Nothing was released: the hold ended or changed first.
			op.Result, op.Reason, op.Detail = ghistory.Refused, reason.Of(err).String(), op.Detail+": "+err.Error()
			h.ops.record(op)
			last = err
			continue
		}
		// The approval's outcome is unknown: the force record says.
		rev, found, rerr := h.forceRecord(ctx, act.GetId())
		if rerr != nil || !found {
			op.Result, op.Detail = ghistory.Unknown, op.Detail+": "+err.Error()
			h.ops.record(op)
			return fmt.Errorf("force-release: approval of request %s: %w (force record found %v, read: %v)", act.GetId(), err, found, rerr)
		}
		op.Result, op.ReleasedAt, op.Return = ghistory.OK, rev, ghistory.Now()
		h.ops.record(op)
		return nil
	}
	return fmt.Errorf("force-release: no hold of the gate class was force-released in %s: %v", forceTries, last)
}

// withdraw denies the requester's own request, which names a hold other
// than the one meant.
func (h *history) withdraw(ctx context.Context, alice adminv1.AdminServiceClient, id string) {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	alice.DenyAction(h.ops.as(dctx, requester), &adminv1.DenyActionRequest{Id: id, Reason: "gate: not the hold read"})
}

// youngHold is the youngest hold of the gate class on the coord cluster,
// if one was granted less than forceYoung ago to a client of the history
// that has since made its write under it (its history says so): a holder
// alive and renewing but done with its work, as a leaked lock's is. (A
// holder released in the middle of a read-modify-write may write before
// the next holder's first write, which the fence then accepts, and the
// next holder's write, made from an older read, loses it: a hazard of
// every fence that checks writes only, docs/force-release.md.)
func (h *history) youngHold(ctx context.Context) (heldKey, bool, error) {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := h.coord.Get(gctx, lockkey.HoldPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return heldKey{}, false, err
	}
	var young []heldKey
	for _, kv := range resp.Kvs {
		var rec struct {
			Class string    `json:"class"`
			Since time.Time `json:"since"`
		}
		if json.Unmarshal(kv.Value, &rec) != nil || rec.Class != "gate" || time.Since(rec.Since) > forceYoung {
			continue
		}
		young = append(young, heldKey{key: strings.TrimPrefix(string(kv.Key), lockkey.HoldPrefix), session: kv.Lease, revision: kv.ModRevision, since: rec.Since})
	}
	if len(young) == 0 {
		return heldKey{}, false, nil
	}
	// The histories are flushed op by op, so they can be read mid-run.
	ops, err := ghistory.Load(h.paths...)
	if err != nil {
		return heldKey{}, false, err
	}
	clients := map[int64]int{}
	type grant struct {
		key      string
		session  int64
		revision int64
	}
	wrote := map[grant]bool{}
	for _, op := range ops {
		switch op.Kind {
		case ghistory.Session:
			clients[op.Session] = op.Client
		case ghistory.Write:
			wrote[grant{op.Key, op.Session, token.Token(op.Token).Revision()}] = true
		}
	}
	var best heldKey
	for _, hk := range young {
		c, ok := clients[hk.session]
		if !ok || !wrote[grant{hk.key, hk.session, hk.revision}] || !hk.since.After(best.since) {
			continue
		}
		hk.client = c
		best = hk
	}
	return best, best.key != "", nil
}

// forceRecord reads request id's force record on the coord cluster: its
// revision is the release Txn's.
func (h *history) forceRecord(ctx context.Context, id string) (int64, bool, error) {
	var err error
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var resp *clientv3.GetResponse
		resp, err = h.coord.Get(gctx, audit.ForcePrefix+id)
		cancel()
		if err == nil {
			if len(resp.Kvs) == 0 {
				return 0, false, nil
			}
			return resp.Kvs[0].ModRevision, true, nil
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return 0, false, err
}

// forceProves says whether a force-release history proves anything: a
// hold was force-released, another session was granted the key after
// the release, and a holder told its hold ended went on to its late
// write under the released token (which the fence must refuse; the
// checker judges the outcome). A holder not told makes no late write:
// what catches that is the checker's force-untold.
func forceProves(ops []ghistory.Op) error {
	forced := checker.Forced(ops)
	if len(forced) == 0 {
		return errors.New("no hold was force-released: the history proves nothing about force-release")
	}
	for _, f := range forced {
		next := false
		for _, op := range ops {
			next = next || op.Kind == ghistory.Acquire && op.Result == ghistory.OK && op.Key == f.Key && op.Session != f.Session &&
				token.Token(op.Token).Revision() > f.ReleasedAt
		}
		if !next {
			return fmt.Errorf("no session was granted %s after its force-release (revision %d): the history proves nothing about the next holder", f.Key, f.ReleasedAt)
		}
		if told, late := lateWrites(ops, f); told != 0 && len(late) == 0 {
			return fmt.Errorf("the holder told of the force-release of %s made no late write after a newer one: the history proves nothing about the fence", f.Key)
		}
	}
	return nil
}

// lateWrites are the writes under the force-released grant f after its
// holder was told (its first Fenced op, at told; 0 if never).
func lateWrites(ops []ghistory.Op, f checker.ForcedGrant) (told int64, late []ghistory.Op) {
	mine := func(op ghistory.Op) bool {
		return op.Key == f.Key && op.Session == f.Session && token.Token(op.Token).Revision() == f.Revision
	}
	for _, op := range ops {
		if op.Kind == ghistory.Fenced && mine(op) && (told == 0 || op.Call < told) {
			told = op.Call
		}
	}
	for _, op := range ops {
		if told != 0 && op.Kind == ghistory.Write && mine(op) && op.Call > told {
			late = append(late, op)
		}
	}
	return told, late
}

// LateWrites counts the writes under force-released grants made after
// their holders were told, and how many of them the fence refused.
func LateWrites(ops []ghistory.Op) (made, refused int) {
	for _, f := range checker.Forced(ops) {
		_, late := lateWrites(ops, f)
		for _, op := range late {
			made++
			if op.Result == ghistory.Stale {
				refused++
			}
		}
	}
	return made, refused
}
