// Package traffic is the release gate's workload: a client process running
// the lock-set loop of Jepsen's etcd lock test against the real service and
// a fenced record in PostgreSQL, recording every operation:
//
//	acquire K -> start (CanStart) -> read record -> append own id, write it
//	back through the reference fence with the token -> release
package traffic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/pgfence"
	"github.com/lockplane/lockplane/test/gate/history"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Table holds the fenced records: one row per key.
var Table = pgfence.Table{Name: "gate_records"}

// Config is one client.
type Config struct {
	Client   int      `json:"client"`
	Profile  string   `json:"profile"`
	Identity string   `json:"identity"`
	Class    string   `json:"class"`
	Keys     []string `json:"keys"`
	Postgres string   `json:"postgres"`
	History  string   `json:"history"`
	Until    int64    `json:"until"` // CLOCK_MONOTONIC ns
	Seed     uint64   `json:"seed"`
	// Unsafe skips the fence: a plain UPDATE. A negative control.
	Unsafe bool `json:"unsafe"`
	// Locker is LockerLockplane (the default) or LockerWatchGrant, the
	// unsafe locker of the other negative control, which locks straight in
	// etcd at Etcd with leases of TTL.
	Locker string        `json:"locker,omitempty"`
	Etcd   []string      `json:"etcd,omitempty"`
	TTL    time.Duration `json:"ttl,omitempty"`
	// Handoff, when set, runs the handoff-deadline workload: each pair of
	// clients on one hot key, each wait ending on a tick of a grid of this
	// period (CLOCK_MONOTONIC, shared by every client process) and each
	// release timed to land just before a tick, inside the last ~200 ms
	// of the waits ending there. A refused Acquire is followed by an
	// Inspect: a key still held by the refused session is a grant nobody
	// knows of.
	Handoff time.Duration `json:"handoff,omitempty"`
	// LongHold, when set, keeps every grant whose token's epoch is above
	// LongHoldAbove held that long, sampling CanStart (a Start each time
	// it is true) every 100 ms: holders long enough that a lease lapsing
	// under a holder who still may start shows as overlapping windows.
	LongHold      time.Duration `json:"long_hold,omitempty"`
	LongHoldAbove uint32        `json:"long_hold_above,omitempty"`
	// Linger, when set, runs the force-release workload: every grant is
	// kept that long after its write, CanStart sampled every 100 ms (a
	// Start each time it is true), so that two operators can
	// force-release a hold its holder is still using. Waits are
	// LingerWait long, so a released key is soon taken. A holder told its
	// hold ended goes on as a leaked holder would (lateWrite): once a
	// newer holder's write is in the record, it writes under its old
	// token, and the fence must refuse it.
	Linger time.Duration `json:"linger,omitempty"`
	// Deaf makes the holder not told: CanStart ignores the service's
	// report that a hold ended (only the session's lease counts) and
	// OnFence is not recorded. A negative control of the force-release
	// fault, which must fail it.
	Deaf bool `json:"deaf,omitempty"`
	// Thief runs the steal workload's adversary (thief.go): before each
	// cycle it ends the key's current hold, another identity's, with that
	// identity's session and the token it learnt through the public API,
	// then takes the key as a polite client does.
	Thief bool `json:"thief,omitempty"`
	// ThiefVia are the profiles of the other arbiters, through which the
	// thief tries each release too.
	ThiefVia []string `json:"thief_via,omitempty"`
	// Classes, when set, runs the two-tier workload: each cycle names the
	// next of these classes for its key, so one key is asked for through
	// every class the identity may use (on both tiers). A service that
	// lets the request's class pick the cluster grants one key on two.
	Classes []string `json:"classes,omitempty"`
	// Probe follows every definite refusal of an Acquire (any reason but
	// CONTENDED and those of an unknown outcome) with an Inspect, as the
	// handoff workload does after a wait ends: a refused session that
	// holds the key holds a grant nobody knows of (the nospace fault).
	Probe bool `json:"probe,omitempty"`
}

// LingerWait is how long a wait of the force-release workload lasts;
// LateWait how long a told holder watches the record for a newer
// holder's write before giving its late write up.
const (
	LingerWait = 500 * time.Millisecond
	LateWait   = 5 * time.Second
)

// Prepare creates the records table and one empty record per key.
func Prepare(ctx context.Context, url string, keys []string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS gate_records (id text PRIMARY KEY, value text NOT NULL DEFAULT '')"); err != nil {
		return err
	}
	if err := Table.Migrate(ctx, conn); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := conn.Exec(ctx, "INSERT INTO gate_records (id) VALUES ($1) ON CONFLICT DO NOTHING", k); err != nil {
			return err
		}
	}
	return nil
}

// Final reads every record.
func Final(ctx context.Context, url string) (map[string][]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT id, value FROM gate_records")
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for rows.Next() {
		var id, v string
		if err := rows.Scan(&id, &v); err != nil {
			return nil, err
		}
		out[id] = split(v)
	}
	return out, rows.Err()
}

func split(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Run loops until cfg.Until, recording to cfg.History.
func Run(ctx context.Context, cfg Config) error {
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := history.NewRecorder(f)
	l, err := newLocker(cfg)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Client)))
	w := &worker{cfg: cfg, rec: rec, l: l, rng: rng, early: 30 * time.Millisecond}
	defer w.close()
	if lp, ok := l.(*lockplane); ok {
		lp.deaf = cfg.Deaf
		if !cfg.Deaf {
			lp.onFence = func(key string, session int64, tok token.Token) {
				now := history.Now()
				w.op(history.Op{Session: session, Key: key, Kind: history.Fenced, Call: now, Return: now, Result: history.OK, Token: uint64(tok)})
			}
		}
	}
	var th *thief
	if lp, ok := l.(*lockplane); ok && cfg.Thief {
		th = newThief(w, lp, spiffeOf(cfg))
	}
	for seq := 0; history.Now() < cfg.Until && ctx.Err() == nil; seq++ {
		key := cfg.Keys[rng.IntN(len(cfg.Keys))]
		if lp, ok := l.(*lockplane); ok && len(cfg.Classes) > 0 {
			lp.class = cfg.Classes[seq%len(cfg.Classes)]
		}
		if th != nil {
			// Whatever the service answered, the thief then asks for the
			// key as any client does: at once if the hold was ended.
			th.steal(ctx, key)
		}
		if cfg.Handoff > 0 {
			// Clients 2k and 2k+1 share a hot key, one through each
			// arbiter: a release on one is taken by the other's waiter
			// through its watch and grant attempt, not handed over in the
			// release's own Txn to a waiter of the same arbiter. They are
			// replicas of one identity (runner.Replicas): the handoff
			// runs between two instances of it.
			key = cfg.Keys[cfg.Client/2%len(cfg.Keys)]
		}
		w.cycle(ctx, key, fmt.Sprintf("c%d.%d", cfg.Client, seq))
	}
	return nil
}

type worker struct {
	cfg  Config
	rec  *history.Recorder
	l    Locker
	rng  *rand.Rand
	conn *pgx.Conn
	// session is the last session recorded as opened.
	session int64
	// early is how long before their deadlines this client's waits were
	// refused, on average: where the handoff workload aims releases.
	early time.Duration
}

// close closes the locker and records whether the service confirmed the
// close of the live session: the stranded check holds the service to it.
func (w *worker) close() {
	sid := w.l.Current()
	call := history.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := history.Unknown
	if w.l.Close(ctx) {
		r = history.OK
	}
	if sid != 0 {
		w.op(history.Op{Session: sid, Kind: history.Close, Call: call, Return: history.Now(), Result: r})
	}
}

// noteSession records a session the locker opened during a call that
// began at call.
func (w *worker) noteSession(call int64) {
	if sid := w.l.Current(); sid != 0 && sid != w.session {
		w.session = sid
		w.op(history.Op{Session: sid, Kind: history.Session, Call: call, Return: history.Now(), Result: history.OK})
	}
}

func (w *worker) op(op history.Op) {
	op.Client = w.cfg.Client
	w.rec.Record(op)
}

func (w *worker) db(ctx context.Context) (*pgx.Conn, error) {
	if w.conn != nil && !w.conn.IsClosed() {
		return w.conn, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, w.cfg.Postgres)
	w.conn = conn
	return conn, err
}

func (w *worker) cycle(ctx context.Context, key, me string) {
	call := history.Now()
	lockFor := 2 * time.Second
	if w.cfg.Linger > 0 {
		lockFor = LingerWait
	}
	if w.cfg.Handoff > 0 {
		// A short wait ending on the next tick at least half a period
		// away: the tick a holder's release is timed against.
		lockFor = time.Duration(w.nextTick(call+int64(w.cfg.Handoff/2)) - call)
	}
	actx, cancel := context.WithTimeout(ctx, lockFor)
	h, err := w.l.Lock(actx, key)
	cancel()
	ret := history.Now()
	if w.cfg.Handoff > 0 && reason.Of(err) == lockv1.ErrorReason_CONTENDED {
		// How early before its caller's deadline the service ends a wait.
		w.early = (3*w.early + time.Duration(call+int64(lockFor)-ret)) / 4
	}
	w.noteSession(call)
	if errors.Is(err, ErrNoSession) {
		time.Sleep(100 * time.Millisecond) // the service is down; do not spin
		return
	}
	if err != nil {
		sid := sessionOf(err)
		w.op(history.Op{Session: sid, Key: key, Kind: history.Acquire, Call: call, Return: ret, Result: history.Refused,
			Reason: reasonOf(err), Detail: err.Error(), Class: w.class()})
		if w.cfg.Handoff > 0 && waitEnded(err) || w.cfg.Probe && definite(err) {
			w.probe(ctx, key, sid)
		}
		if reason.Of(err) != lockv1.ErrorReason_CONTENDED && !(w.cfg.Handoff > 0 && waitEnded(err)) {
			time.Sleep(50 * time.Millisecond) // the service is failing fast; do not spin
		}
		return
	}
	tok, sid := h.Token(), h.Session()
	w.op(history.Op{Session: sid, Key: key, Kind: history.Acquire, Call: call, Return: ret, Result: history.OK, Token: uint64(tok), Class: w.class()})
	defer func() {
		if w.cfg.Handoff > 0 {
			w.sleepUntil(ctx, w.releaseAt())
		}
		call := history.Now()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := h.Release(rctx)
		cancel()
		r := history.OK
		if err != nil {
			r = history.Unknown
		}
		w.op(history.Op{Session: sid, Key: key, Kind: history.Release, Call: call, Return: history.Now(), Result: r, Token: uint64(tok)})
	}()
	if !h.CanStart() {
		return
	}
	now := history.Now()
	w.op(history.Op{Session: sid, Key: key, Kind: history.Start, Call: now, Return: now, Result: history.OK, Token: uint64(tok)})
	if w.cfg.LongHold > 0 && tok.Epoch() > w.cfg.LongHoldAbove {
		// Not stopping at the first false: a renewal missed across an
		// arbiter restart makes CanStart false until the next one lands,
		// and what the record must show is whether it came back true.
		for until := min(now+int64(w.cfg.LongHold), w.cfg.Until); history.Now() < until && ctx.Err() == nil; {
			time.Sleep(100 * time.Millisecond)
			if h.CanStart() {
				now := history.Now()
				w.op(history.Op{Session: sid, Key: key, Kind: history.Start, Call: now, Return: now, Result: history.OK, Token: uint64(tok)})
			}
		}
	}

	conn, err := w.db(ctx)
	if err != nil {
		return
	}
	call = history.Now()
	var value string
	var mark int64
	err = conn.QueryRow(ctx, "SELECT value, fence FROM gate_records WHERE id = $1", key).Scan(&value, &mark)
	if err != nil {
		w.op(history.Op{Session: sid, Key: key, Kind: history.Read, Call: call, Return: history.Now(), Result: history.Unknown})
		return
	}
	w.op(history.Op{Session: sid, Key: key, Kind: history.Read, Call: call, Return: history.Now(), Result: history.OK, Value: split(value), Mark: uint64(mark)})

	// A little work between read and write: where a paused holder is
	// caught. CanStart is sampled again, for the record only: in-flight
	// work finishes (ADR-12), and the fence must refuse it if it is late.
	time.Sleep(50 * time.Millisecond)
	if h.CanStart() {
		now := history.Now()
		w.op(history.Op{Session: sid, Key: key, Kind: history.Start, Call: now, Return: now, Result: history.OK, Token: uint64(tok)})
	}
	w.fencedWrite(ctx, conn, sid, key, tok, append(split(value), me))
	if w.cfg.Linger > 0 {
		w.linger(ctx, conn, h, key, sid, tok, me)
	}
}

// fencedWrite writes next under tok and records the write with its
// outcome: refused by the fence (Stale), unknown, or accepted.
func (w *worker) fencedWrite(ctx context.Context, conn *pgx.Conn, sid int64, key string, tok token.Token, next []string) {
	call := history.Now()
	err := w.write(ctx, conn, tok, key, strings.Join(next, ","))
	r := history.OK
	switch {
	case errors.Is(err, fence.ErrStaleFence):
		r = history.Stale
	case err != nil:
		r = history.Unknown
	}
	w.op(history.Op{Session: sid, Key: key, Kind: history.Write, Call: call, Return: history.Now(), Result: r, Token: uint64(tok), Value: next})
}

// ender is a grant that says whether the service ended it under its
// holder (lockclient's Fenced).
type ender interface{ Ended() bool }

// linger keeps a grant after its write, sampling CanStart; a holder told
// its hold ended makes its late write.
func (w *worker) linger(ctx context.Context, conn *pgx.Conn, h Grant, key string, sid int64, tok token.Token, me string) {
	for until := min(history.Now()+int64(w.cfg.Linger), w.cfg.Until); history.Now() < until && ctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		if h.CanStart() {
			now := history.Now()
			w.op(history.Op{Session: sid, Key: key, Kind: history.Start, Call: now, Return: now, Result: history.OK, Token: uint64(tok)})
			continue
		}
		if e, ok := h.(ender); ok && e.Ended() {
			w.lateWrite(ctx, conn, key, sid, tok, me+"-late")
			return
		}
	}
}

// lateWrite is a deposed holder going on with its work: it waits (up to
// LateWait) until the record carries a newer holder's token, then reads
// it and writes under its own, older token. The fence must refuse that
// write (Stale). A late write made before any newer write would be legal
// and prove nothing, so none is made then.
func (w *worker) lateWrite(ctx context.Context, conn *pgx.Conn, key string, sid int64, tok token.Token, me string) {
	for until := history.Now() + int64(LateWait); history.Now() < until && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		call := history.Now()
		var value string
		var mark int64
		if err := conn.QueryRow(ctx, "SELECT value, fence FROM gate_records WHERE id = $1", key).Scan(&value, &mark); err != nil {
			continue
		}
		if uint64(mark) <= uint64(tok) {
			continue
		}
		w.op(history.Op{Session: sid, Key: key, Kind: history.Read, Call: call, Return: history.Now(), Result: history.OK, Value: split(value), Mark: uint64(mark)})
		w.fencedWrite(ctx, conn, sid, key, tok, append(split(value), me))
		return
	}
}

// reasonOf names err's lockplane.lock.v1 reason; "" if it carries none.
func reasonOf(err error) string {
	if r := reason.Of(err); r != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return r.String()
	}
	return ""
}

// class is the class this cycle named, when the workload varies it.
func (w *worker) class() string {
	if lp, ok := w.l.(*lockplane); ok && len(w.cfg.Classes) > 0 {
		return lp.class
	}
	return ""
}

// definite reports a refusal after which the caller holds nothing: the
// service answered with a reason, not CONTENDED (a wait's end, which a
// handoff may race) and not one of an unknown outcome.
func definite(err error) bool {
	switch reason.Of(err) {
	case lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, lockv1.ErrorReason_CONTENDED, lockv1.ErrorReason_NO_QUORUM, lockv1.ErrorReason_STORE_ERROR,
		lockv1.ErrorReason_LEAKED:
		return false
	}
	// A fenced session's lease may outlive its client's deadline at etcd
	// for a moment, holds and all.
	return !errors.Is(err, lockclient.ErrFenced)
}

// spiffeOf is the SPIFFE ID of cfg's identity ("" if unknown).
func spiffeOf(cfg Config) string {
	p, err := profile.Load(cfg.Profile)
	if err != nil {
		return ""
	}
	return p.Identities[cfg.Identity].SPIFFEID
}

// waitEnded reports a refusal that ends a wait: CONTENDED when the wait
// ran out, or the caller's own deadline. The key may have been handed to
// the session as the wait ended.
func waitEnded(err error) bool {
	if reason.Of(err) == lockv1.ErrorReason_CONTENDED || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	c := status.Code(err)
	return c == codes.DeadlineExceeded || c == codes.Canceled
}

// probe asks who holds key after session's Acquire of it was refused. The
// refused session may not hold it; a client library may end such a hold
// itself, so the probe polls for up to a second while the session still
// holds it, and records what it last saw.
func (w *worker) probe(ctx context.Context, key string, session int64) {
	if session == 0 {
		return
	}
	call := history.Now()
	r, holder, held := history.Unknown, int64(0), int64(0)
	for until := call + int64(time.Second); ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		h, since, err := w.l.Holder(ictx, key)
		cancel()
		if err == nil {
			r, holder, held = history.OK, h, 0
			if !since.IsZero() {
				// The hold record's time is the arbiter's wall clock, on
				// this host.
				held = history.Now() - int64(time.Since(since))
			}
		}
		if (err == nil && h != session) || history.Now() >= until {
			break
		}
	}
	w.op(history.Op{Session: session, Key: key, Kind: history.Inspect, Call: call, Return: history.Now(), Result: r, Holder: holder, Since: held})
}

// nextTick is the first tick of the handoff grid at or after t.
func (w *worker) nextTick(t int64) int64 {
	p := int64(w.cfg.Handoff)
	return (t + p - 1) / p * p
}

// releaseAt times a release just before a tick, where waits end: three in
// four in the 20 ms before the moment the service was seen to end waits (a
// little before their callers' deadlines), so that the waiter woken by the
// release is still deciding as its wait ends; the rest anywhere in the
// last 200 ms.
func (w *worker) releaseAt() int64 {
	var d time.Duration
	switch w.rng.IntN(4) {
	case 0, 1, 2:
		d = w.early + time.Duration(w.rng.Int64N(int64(20*time.Millisecond)))
	default:
		d = time.Duration(w.rng.Int64N(int64(200 * time.Millisecond)))
	}
	d = min(d, 200*time.Millisecond)
	return w.nextTick(history.Now()+int64(d)+int64(10*time.Millisecond)) - int64(d)
}

func (w *worker) sleepUntil(ctx context.Context, t int64) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(t - history.Now())):
	}
}

func (w *worker) write(ctx context.Context, conn *pgx.Conn, tok token.Token, key, value string) error {
	if w.cfg.Unsafe {
		_, err := conn.Exec(ctx, "UPDATE gate_records SET value = $1, fence = $2 WHERE id = $3", value, int64(tok), key)
		return err
	}
	return Table.Update(ctx, conn, tok, key, pgfence.Col{Name: "value", Value: value})
}
