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
	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/pgfence"
	"github.com/lockplane/lockplane/services/reason"
	"github.com/lockplane/lockplane/services/token"
	"github.com/lockplane/lockplane/test/gate/history"
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
}

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
	defer l.Close(context.Background())
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Client)))
	w := &worker{cfg: cfg, rec: rec, l: l}
	for seq := 0; history.Now() < cfg.Until && ctx.Err() == nil; seq++ {
		key := cfg.Keys[rng.IntN(len(cfg.Keys))]
		w.cycle(ctx, key, fmt.Sprintf("c%d.%d", cfg.Client, seq))
	}
	return nil
}

type worker struct {
	cfg  Config
	rec  *history.Recorder
	l    Locker
	conn *pgx.Conn
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
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, err := w.l.Lock(actx, key)
	cancel()
	ret := history.Now()
	if errors.Is(err, ErrNoSession) {
		time.Sleep(100 * time.Millisecond) // the service is down; do not spin
		return
	}
	if err != nil {
		w.op(history.Op{Session: sessionOf(err), Key: key, Kind: history.Acquire, Call: call, Return: ret, Result: history.Refused, Detail: err.Error()})
		if reason.Of(err) != lockv1.ErrorReason_CONTENDED {
			time.Sleep(50 * time.Millisecond) // the service is failing fast; do not spin
		}
		return
	}
	tok, sid := h.Token(), h.Session()
	w.op(history.Op{Session: sid, Key: key, Kind: history.Acquire, Call: call, Return: ret, Result: history.OK, Token: uint64(tok)})
	defer func() {
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
	next := append(split(value), me)
	call = history.Now()
	err = w.write(ctx, conn, tok, key, strings.Join(next, ","))
	r := history.OK
	switch {
	case errors.Is(err, fence.ErrStaleFence):
		r = history.Stale
	case err != nil:
		r = history.Unknown
	}
	w.op(history.Op{Session: sid, Key: key, Kind: history.Write, Call: call, Return: history.Now(), Result: r, Token: uint64(tok), Value: next})
}

func (w *worker) write(ctx context.Context, conn *pgx.Conn, tok token.Token, key, value string) error {
	if w.cfg.Unsafe {
		_, err := conn.Exec(ctx, "UPDATE gate_records SET value = $1, fence = $2 WHERE id = $3", value, int64(tok), key)
		return err
	}
	return Table.Update(ctx, conn, tok, key, pgfence.Col{Name: "value", Value: value})
}
