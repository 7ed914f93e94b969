package arbiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"google.golang.org/grpc/codes"
)

// A key lives on one cluster, decided by the policy set; but arbiters roll
// to a new set one at a time, and a restarted arbiter is not refused a set
// that moves keys between tiers as a reload is (live.Policy). The epoch
// record names the placement its cluster is served under
// (epoch.Record.Placement), every grant compares the record, and an
// arbiter grants nothing under a record placed otherwise: two arbiters
// that disagree on a key's tier never both grant it. Keys change tier only
// by an epoch advance, which deletes every hold and stamps the advancing
// arbiter's placement.

// placer is a registry that states its placement (live.Policy).
type placer interface{ Placement() string }

// placementOf is where reg puts keys (class.Placement); "" for a registry
// that cannot say, whose arbiter neither checks nor stamps placements.
func placementOf(reg class.Registry) string {
	switch r := reg.(type) {
	case placer:
		return r.Placement()
	case class.Static:
		return class.Placement(r)
	}
	return ""
}

// placedAttempts bounds the stamp-and-read-again rounds of placed: each
// lost race means the record was rewritten, which happens rarely.
const placedAttempts = 3

// placed returns st if it is placed as this arbiter places keys, first
// stamping this arbiter's placement into a record that has none (one
// bootstrapped before placements existed, or by a process that knows no
// registry). A record placed otherwise is refused PLACEMENT_MISMATCH.
// The grant's Txn compares the record's bytes, so a record placed or
// advanced after st was read fails the grant's compare: the check holds
// at commit.
func (a *Arbiter) placed(ctx context.Context, st epoch.State) (epoch.State, error) {
	for range placedAttempts {
		switch {
		case a.placement == "" || st.Placement == a.placement:
			return st, nil
		case st.Placement != "":
			return epoch.State{}, a.placementErr(st)
		}
		if err := a.stampPlacement(ctx, st); err != nil {
			return epoch.State{}, err
		}
		var err error
		if err = a.reloadEpoch(ctx); err != nil {
			return epoch.State{}, err
		}
		if st, err = a.epochFor(ctx); err != nil {
			return epoch.State{}, err
		}
	}
	return epoch.State{}, refuse.With(codes.Unavailable, lockv1.ErrorReason_EPOCH_CHANGED,
		fmt.Sprintf("cluster %s's epoch record kept changing while this arbiter recorded its placement in it; retry", a.cfg.Cluster),
		"cluster", a.cfg.Cluster)
}

// stampPlacement records this arbiter's placement in st, a record without
// one, through the Admin API's etcd user (the lock path's may not write
// the record). A lost race (the record changed) is no error: the caller
// reads the record again.
func (a *Arbiter) stampPlacement(ctx context.Context, st epoch.State) error {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	if _, err := epoch.Place(octx, a.admin, st, a.placement); err != nil {
		if errors.Is(err, epoch.ErrChanged) {
			return nil
		}
		return a.etcdFailure(ctx, err)
	}
	a.log.Info("recorded this arbiter's key placement in the epoch record", "cluster", a.cfg.Cluster, "epoch", st.Epoch, "placement", a.placement)
	return nil
}

// readyPlaced is Ready's load of the record: it stamps a record without a
// placement, and logs, without failing, one placed otherwise: the arbiter
// serves on, refusing grants, so that the operator's advance can reach it.
func (a *Arbiter) readyPlaced(ctx context.Context) (epoch.State, error) {
	st, err := a.epochFor(ctx)
	if err != nil {
		return st, err
	}
	placed, err := a.placed(ctx, st)
	if err != nil && reason.Of(err) == lockv1.ErrorReason_PLACEMENT_MISMATCH {
		a.log.Error("this arbiter's policy set places keys on other tiers than the set the cluster serves under; it grants nothing here until "+
			"it runs the serving set again, or every arbiter runs this set and the epoch is advanced (lockctl epoch advance)",
			"cluster", a.cfg.Cluster, "placement", a.placement, "recorded", st.Placement)
		return st, nil
	}
	return placed, err
}

// placementErr refuses a grant under st, a record placed by another
// policy set than this arbiter's.
func (a *Arbiter) placementErr(st epoch.State) error {
	flag := ""
	if a.shardOf {
		flag = " --cluster " + a.cfg.Cluster
	}
	return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_PLACEMENT_MISMATCH,
		fmt.Sprintf("this arbiter's policy set puts keys on other tiers than the set cluster %s is served under (placement %s, recorded %s): "+
			"granting here could put one key on two clusters, so nothing was granted; retry on another arbiter. Operators: run the serving "+
			"set on this arbiter again, or, to rehome keys, roll every arbiter to the new set and advance the epoch (lockctl epoch advance%s "+
			"--expected %d --reason ...), which ends every hold", a.cfg.Cluster, a.placement, st.Placement, flag, st.Epoch),
		"cluster", a.cfg.Cluster, "placement", a.placement, "recorded", st.Placement)
}
