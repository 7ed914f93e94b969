package traffic

import (
	"context"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/gate/history"
)

// thief is the steal workload's adversary: an identity of its own that,
// before each of its cycles, ends another identity's hold of the key
// through the public API alone, then takes the key as any client does.
// What it learns, it learns as any workload in the namespace can: the
// holder's session from Inspect, the epoch from Admin.Status, the token
// by bisection through ValidateToken (SUPERSEDED below the hold's
// revision, NOT_ISSUED above it, read_revision bounding the search). A
// service that lets it release (history.Steal OK) or renew
// (history.StealRenew OK) a session it did not open has no mutual
// exclusion: the victim's client keeps CanStart true while the thief
// works. The refusals a correct service answers (PERMISSION_DENIED,
// SESSION_NOT_OWNED, a ValidateToken without revisions) are recorded as
// refused and the thief goes on as a polite client.
type thief struct {
	w    *worker
	lock lockv1.LockServiceClient
	// others are the other arbiters (Config.ThiefVia): a release is
	// tried through each, so the path of an arbiter that has the
	// victim's session cached is tried too.
	others []lockv1.LockServiceClient
	admin  adminv1.AdminServiceClient
	class  string
	me     string // the thief's SPIFFE ID, from its own session
}

func newThief(w *worker, lp *lockplane, me string) *thief {
	t := &thief{w: w, lock: lockv1.NewLockServiceClient(lp.c.Conn()), admin: adminv1.NewAdminServiceClient(lp.c.Conn()), class: lp.class, me: me}
	for _, path := range w.cfg.ThiefVia {
		p, err := profile.Load(path)
		if err != nil {
			continue
		}
		c, err := lockclient.DialProfile(p, w.cfg.Identity)
		if err != nil {
			continue
		}
		t.others = append(t.others, lockv1.NewLockServiceClient(c.Conn()))
	}
	return t
}

// mint is a token the search tries; out of range is 0, never valid.
func mint(epoch uint32, revision int64) token.Token {
	t, _ := token.Mint(epoch, revision)
	return t
}

// steal tries to end the current hold of key, if another identity's, and
// records what the service answered. It reports whether the hold ended.
func (t *thief) steal(ctx context.Context, key string) bool {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	in, err := t.lock.Inspect(ictx, &lockv1.InspectRequest{Key: key, Class: t.class})
	if err != nil || !in.GetHeld() {
		return false
	}
	victim := in.GetHolder()
	if t.me != "" && victim.GetIdentity() == t.me {
		return false
	}
	tok := t.learnToken(ictx, key)
	req := &lockv1.ReleaseRequest{Key: key, SessionId: victim.GetSessionId(), Token: uint64(tok), Class: t.class}
	if tok == 0 {
		// No token learnt (a service that is no oracle): the release that
		// needs none.
		req.AnyToken = true
	}
	released := false
	for _, via := range append([]lockv1.LockServiceClient{t.lock}, t.others...) {
		if released = t.release(ictx, via, req, victim.GetIdentity()); released {
			break
		}
	}
	t.renew(ctx, key, victim.GetSessionId())
	return released
}

// release sends req through one arbiter and records the answer.
func (t *thief) release(ctx context.Context, via lockv1.LockServiceClient, req *lockv1.ReleaseRequest, victim string) bool {
	call := history.Now()
	r, err := via.Release(ctx, req)
	op := history.Op{Session: req.GetSessionId(), Key: req.GetKey(), Kind: history.Steal, Call: call, Return: history.Now(), Token: req.GetToken(),
		Holder: req.GetSessionId(), Detail: "release of " + victim + "'s hold"}
	switch {
	case err == nil && r.GetReleased():
		op.Result = history.OK
	case err == nil:
		op.Result, op.Reason = history.Refused, "NOT_RELEASED"
	default:
		op.Result, op.Reason, op.Detail = history.Refused, reasonOf(err), err.Error()
		if op.Reason == "" {
			op.Result = history.Unknown
		}
	}
	t.w.op(op)
	return op.Result == history.OK
}

// renew sends one KeepAlive for the victim's session: the call that
// extends a session's holds.
func (t *thief) renew(ctx context.Context, key string, session int64) {
	kctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	call := history.Now()
	op := history.Op{Session: session, Key: key, Kind: history.StealRenew, Call: call, Holder: session}
	stream, err := t.lock.KeepAlive(kctx)
	var resp *lockv1.KeepAliveResponse
	if err == nil {
		if err = stream.Send(&lockv1.KeepAliveRequest{SessionId: session}); err == nil {
			resp, err = stream.Recv()
		}
		stream.CloseSend()
	}
	op.Return = history.Now()
	switch {
	case err != nil:
		op.Result, op.Reason, op.Detail = history.Unknown, reasonOf(err), err.Error()
	case resp.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		op.Result, op.Reason, op.Detail = history.Refused, resp.GetError().String(), resp.GetErrorMessage()
	case resp.GetTtl() != nil:
		op.Result = history.OK
	default:
		op.Result = history.Unknown
	}
	t.w.op(op)
}

// learnToken finds the current hold's token of key: the epoch from
// Admin.Status (or, failing that, the search itself), the revision by
// bisection. 0 when the service does not tell.
func (t *thief) learnToken(ctx context.Context, key string) token.Token {
	var epoch uint32
	if st, err := t.admin.Status(ctx, &adminv1.StatusRequest{}); err == nil {
		epoch = st.GetEpoch()
	}
	v, err := t.lock.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(mint(max(epoch, 1), 1)), Class: t.class})
	if err != nil || v.GetReadRevision() == 0 {
		return 0
	}
	if v.GetState() == lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH || epoch == 0 {
		// Status told nothing: the epoch lies above; step it up.
		for e := max(epoch, 1) + 1; e < max(epoch, 1)+16; e++ {
			v, err = t.lock.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(mint(e, 1)), Class: t.class})
			if err != nil {
				return 0
			}
			if v.GetState() != lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH {
				epoch = e
				break
			}
		}
	}
	lo, hi := int64(1), v.GetReadRevision()
	for lo <= hi {
		mid := lo + (hi-lo)/2
		v, err := t.lock.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(mint(epoch, mid)), Class: t.class})
		if err != nil {
			return 0
		}
		switch v.GetState() {
		case lockv1.TokenState_TOKEN_STATE_CURRENT:
			return mint(epoch, mid)
		case lockv1.TokenState_TOKEN_STATE_SUPERSEDED:
			lo = mid + 1
		case lockv1.TokenState_TOKEN_STATE_NOT_ISSUED:
			hi = mid - 1
		default:
			// Ended, another epoch, or a service that answers only
			// valid or not: no oracle.
			return 0
		}
	}
	return 0
}
