package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/resourcetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lockctl's audit answers, as an operator reads them with -o json and a
// window in days: a hold that expired is in audit expiries, and a grant's
// wait in report contention, both parsed as JSON.
func TestAuditExpiriesAndContentionAsJSON(t *testing.T) {
	ch := resourcetest.StartClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := ch.Database(t)
	store := chstore.New(ch.URL(), db, chstore.WithCredentials(ch.Writer()))
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// A durable class: its waiter's queue key is an event the test sees.
	queuedCls := class.Class{Name: "queued", TTL: 3 * time.Second, Tier: class.TierCoord, Fairness: class.FairnessDurable}
	env := devenvtest.Start(t, devenv.Options{Audit: store, AuditReader: chstore.New(ch.URL(), db, chstore.WithCredentials(ch.Reader())),
		Classes: class.NewStatic(devenvtest.Fast, queuedCls)})

	// A wait: demo holds, other queues, demo releases, other is granted.
	const waitedKey, expired = "team-a/cli/waited", "team-a/cli/expired"
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), queuedCls.Name)
	h, err := a.Lock(ctx, waitedKey, noFence)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	queued := env.Etcd.Watch(wctx, lockkey.WaitersOf(waitedKey), clientv3.WithPrefix(), clientv3.WithFilterDelete())
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), queuedCls.Name)
	got := make(chan error, 1)
	go func() { _, err := b.Lock(ctx, waitedKey, noFence); got <- err }()
	if wr := <-queued; wr.Err() != nil || len(wr.Events) == 0 {
		t.Fatalf("no waiter queued: %v", wr.Err())
	}
	stopWatch()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// An expiry: a session nobody renews, holding a key.
	api := lockv1.NewLockServiceClient(devenvtest.Client(t, env, "demo").Conn())
	s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name, Instance: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: expired, SessionId: s.GetSessionId(), Class: devenvtest.Fast.Name, Instance: "gone"}); err != nil {
		t.Fatal(err)
	}

	operator := func(args ...string) []byte {
		t.Helper()
		out, err := cmd(env, append([]string{"--identity", "alice"}, args...)...).Output()
		if err != nil {
			t.Fatalf("lockctl %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	var expiries struct {
		Counts []struct {
			Namespace string `json:"namespace"`
			Class     string `json:"class"`
			Count     int64  `json:"count,string"`
		} `json:"counts"`
		Events []struct {
			Key  string `json:"key"`
			Kind string `json:"kind"`
		} `json:"events"`
	}
	var contention struct {
		Contention []struct {
			Namespace string `json:"namespace"`
			Class     string `json:"class"`
			Grants    int64  `json:"grants,string"`
			Waits     int64  `json:"waits,string"`
			WaitP99Ms int64  `json:"waitP99Ms,string"`
		} `json:"contention"`
	}
	// The store is another server, written every few seconds: poll the
	// answers, within the test's deadline.
	for {
		if err := json.Unmarshal(operator("audit", "expiries", "--since", "1d12h", "-o", "json"), &expiries); err != nil {
			t.Fatalf("audit expiries -o json: %v", err)
		}
		if err := json.Unmarshal(operator("report", "contention", "--since", "7d", "-o", "json"), &contention); err != nil {
			t.Fatalf("report contention -o json: %v", err)
		}
		expiredSeen := len(expiries.Counts) == 1 && expiries.Counts[0].Count == 1 && len(expiries.Events) == 1 && expiries.Events[0].Key == expired
		waited := false
		for _, c := range contention.Contention {
			waited = waited || (c.Class == queuedCls.Name && c.Grants == 2 && c.Waits == 1)
		}
		if expiredSeen && waited {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("expiries %+v, contention %+v: want the expiry of %s and the wait for %s", expiries, contention, expired, waitedKey)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := expiries.Counts[0]; c.Namespace != "team-a" || c.Class != devenvtest.Fast.Name || expiries.Events[0].Kind != "expiry" {
		t.Errorf("expiries %+v", expiries)
	}
	for _, c := range contention.Contention {
		if c.Class == queuedCls.Name && (c.Namespace != "team-a" || c.WaitP99Ms < 1) {
			t.Errorf("contention %+v: want team-a's, with the wait's time", c)
		}
	}
	// A key's history says how long its waiter waited, and a holder's
	// sessions their TTL: in JSON (protojson's camelCase) and in text.
	var history struct {
		Events []struct {
			Kind       string `json:"kind"`
			Identity   string `json:"identity"`
			WaitedMs   int64  `json:"waitedMs,string"`
			TTLSeconds int64  `json:"ttlSeconds,string"`
		} `json:"events"`
	}
	other := env.Profile.Identities["other"].SPIFFEID
	if err := json.Unmarshal(operator("audit", waitedKey, "-o", "json"), &history); err != nil {
		t.Fatalf("audit %s -o json: %v", waitedKey, err)
	}
	var waitedMs int64
	for _, e := range history.Events {
		if e.Kind == "grant" && e.Identity == other {
			waitedMs = e.WaitedMs
		}
	}
	if waitedMs < 1 {
		t.Errorf("audit %s: %+v; want the waiter's grant with its wait", waitedKey, history.Events)
	}
	if out := string(operator("audit", waitedKey)); !strings.Contains(out, "WAITED") ||
		!strings.Contains(out, (time.Duration(waitedMs)*time.Millisecond).String()) {
		t.Errorf("audit %s (%d ms waited):\n%s", waitedKey, waitedMs, out)
	}
	if err := json.Unmarshal(operator("audit", "--holder", other, "-o", "json"), &history); err != nil {
		t.Fatalf("audit --holder -o json: %v", err)
	}
	opened := false
	for _, e := range history.Events {
		opened = opened || (e.Kind == "session_open" && e.TTLSeconds == int64(queuedCls.TTL/time.Second))
	}
	if !opened {
		t.Errorf("audit --holder %s: %+v; want its session's open with the class's TTL", other, history.Events)
	}
	// And the text forms say what they show.
	if out := string(operator("report", "cost")); !strings.Contains(out, "KEEPALIVES (ESTIMATED)") || !strings.Contains(out, "estimated") {
		t.Errorf("report cost:\n%s", out)
	}
	if out := string(operator("report", "contention", "--since", "1d")); !strings.Contains(out, "WAIT P99") {
		t.Errorf("report contention:\n%s", out)
	}
	// A window lockctl cannot read is refused before any call.
	c := cmd(env, "--identity", "alice", "audit", expired, "--since", "1w")
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Run(); exitCode(err) == 0 || !strings.Contains(stderr.String(), `"--since"`) || !strings.Contains(stderr.String(), "whole days") {
		t.Errorf("--since 1w: %v, %q; want a refusal naming --since and the rule", err, stderr.String())
	}
}

func noFence(*lockclient.Hold) {}
