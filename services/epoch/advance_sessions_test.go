package epoch_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An advance ends every session on its cluster: it deletes their records
// with the holds, and, only when a session lived, writes a record whose
// quiet period (Since + Quiet) no arbiter grants in. The record decodes
// the same with or without it, and a cluster with no session keeps none.
func TestAnAdvanceEndsSessionsAndQuietsOnlyIfOneLived(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	boot, err := epoch.Bootstrap(ctx, cli, cli, "coord", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !boot.QuietUntil.IsZero() {
		t.Fatalf("a new cluster's bootstrap keeps a quiet period until %v", boot.QuietUntil)
	}
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	// A 5 s session and a hold: the quiet period is the larger of the
	// change's 7 s and the session's TTL + the margin (6 s).
	for k, v := range map[string]string{lockkey.SessionKey(int64(lease.ID)): `{"identity":"spiffe://t/a","ttl_seconds":5}`, lockkey.HoldKey("team-a/x"): "{}"} {
		if _, err := cli.Put(ctx, k, v, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	// Keys beside the session prefix that an advance must keep.
	kept := []string{lockkey.ClosingKey(int64(lease.ID)), lockkey.ShardLeaseKey(int64(lease.ID), "s1")}
	for _, k := range kept {
		if _, err := cli.Put(ctx, k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	const quiet = 7 * time.Second
	adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "coord", Expected: boot.Epoch, Reason: "test", Quiet: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if adv.DeletedSessions != 1 || adv.DeletedHolds != 1 {
		t.Fatalf("advance deleted %d sessions and %d holds, want 1 and 1", adv.DeletedSessions, adv.DeletedHolds)
	}
	if got := adv.QuietUntil.Sub(adv.Since); got != quiet {
		t.Fatalf("quiet until %v, since %v (%v): want since + %v", adv.QuietUntil, adv.Since, got, quiet)
	}
	st, found, err := epoch.Read(ctx, cli)
	if err != nil || !found || !st.QuietUntil.Equal(adv.QuietUntil) || string(st.Raw) != string(adv.Raw) {
		t.Fatalf("stored record %s (err %v), want the advance's %s", st.Raw, err, adv.Raw)
	}
	for _, k := range kept {
		if get, err := cli.Get(ctx, k); err != nil || len(get.Kvs) != 1 {
			t.Fatalf("the advance deleted %s, which is not a session record (err %v)", k, err)
		}
	}
	// No session left, but the first advance's holders may still believe:
	// an advance within its quiet period keeps it.
	again, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "coord", Expected: adv.Epoch, Reason: "test", Quiet: quiet})
	if err != nil || again.DeletedSessions != 0 || !again.QuietUntil.Equal(adv.QuietUntil) {
		t.Fatalf("advance with no session within the first's quiet period: %+v (err %v), want its quiet period kept", again, err)
	}
}

// The quiet period covers the longest TTL of the sessions the advance
// ends, whatever the caller passes: a class whose TTL a reload shortened,
// or a caller that knows no classes, still waits its sessions out.
func TestAnAdvanceWaitsOutItsLongestSession(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	boot, err := epoch.Bootstrap(ctx, cli, cli, "coord", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{`{"identity":"spiffe://t/a","ttl_seconds":5}`, `{"identity":"spiffe://t/b","ttl_seconds":120}`} {
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)+int64(i)), v, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "coord", Expected: boot.Epoch, Reason: "test", Quiet: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := adv.QuietUntil.Sub(adv.Since), epoch.Quiet(120*time.Second); got != want {
		t.Fatalf("quiet %v, want the longest session's TTL + the margin, %v", got, want)
	}
}
