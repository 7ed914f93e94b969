package main

import (
	"context"
	"fmt"
	"strings"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/spf13/cobra"
)

func statusCmd(g *globals) *cobra.Command {
	var cluster string
	c := &cobra.Command{
		Use:   "status [--cluster NAME]",
		Short: "Show the epoch, the seal, and the etcd members and leader of the coord cluster or an entity shard",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error { return showStatus(ctx, g, c, cluster) })
		},
	}
	c.Flags().StringVar(&cluster, "cluster", "", "an entity shard's name, as `lockctl shards` lists it (default: the coord cluster)")
	return c
}

func showStatus(ctx context.Context, g *globals, c *lockclient.Client, cluster string) error {
	st, err := adminv1.NewAdminServiceClient(c.Conn()).Status(ctx, &adminv1.StatusRequest{Cluster: cluster})
	if err != nil {
		return err
	}
	if g.json() {
		printProto(st)
		return nil
	}
	sealed := "no"
	flag := ""
	if cluster != "" {
		flag = " --cluster " + cluster
	}
	switch {
	case st.GetEpochMissing() && st.GetHighestAllocated() == 0 && cluster == "":
		sealed = "YES: the coord cluster has no epoch records (new, or rebuilt empty); no grants until " +
			"`lockctl epoch advance --expected 0 --above N`, N the highest epoch the region served (see docs/epochs.md)"
	case st.GetEpochMissing():
		sealed = fmt.Sprintf("YES: no epoch record (rebuilt empty or deleted); no grants until `lockctl epoch advance%s --expected 0`", flag)
	case st.GetSealed():
		sealed = fmt.Sprintf("YES: minted for cluster %s; no grants until `lockctl epoch advance%s --expected %d`", st.GetEpochClusterId(), flag, st.GetEpoch())
	}
	allocated := "unknown (no quorum)"
	if st.GetQuorum() {
		allocated = fmt.Sprint(st.GetHighestAllocated())
	}
	quorum := "no: grants and renewals are refused"
	leaderName := ""
	for _, m := range st.GetMembers() {
		if m.GetIsLeader() {
			leaderName = m.GetName()
		}
	}
	if st.GetQuorum() {
		quorum = fmt.Sprintf("yes, leader %s (%s)", leaderName, st.GetLeader())
	}
	name := st.GetCluster()
	if st.GetMapVersion() > 0 {
		name += fmt.Sprintf(" (serving shard map version %d)", st.GetMapVersion())
	}
	fmt.Printf("cluster   %s\nepoch     %d (highest allocated in the region: %s)\nid        %s\nsealed    %s\nquorum    %s\nrevision  %d\narbiter   %s\n",
		name, st.GetEpoch(), allocated, st.GetClusterId(), sealed, quorum, st.GetRevision(), st.GetArbiter())
	for i, m := range st.GetMembers() {
		label := "members"
		if i > 0 {
			label = ""
		}
		state := "down"
		if m.GetHealthy() {
			state = "up"
		}
		if m.GetIsLeader() {
			state += ", leader"
		}
		fmt.Printf("%-9s %-4s %-16s %s  %s\n", label, m.GetName(), m.GetId(), strings.Join(m.GetClientUrls(), ","), state)
	}
	return nil
}

func epochCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "epoch", Short: "Epoch administration: two operators, one requests and another approves (ADR-03, ADR-20)"}
	var expected, above uint32
	var why, cluster string
	var direct bool
	adv := &cobra.Command{
		Use:   "advance --expected N --reason TEXT [--cluster NAME] [--above M] [--direct]",
		Short: "Request that a cluster move from epoch N (0: it has no record) to a new epoch, deleting every hold; a different operator approves",
		Long: `Advance unseals a restored cluster, a cluster rebuilt empty or one whose epoch record
was deleted. The new epoch is allocated from the coord cluster, above every epoch it
has recorded for any cluster, so no token can repeat. --expected is the epoch
` + "`lockctl status`" + ` shows (0 when it reports no epoch record).

An advance deletes every hold and waiter of the cluster, so it is a two-person
action: advance records a request and prints its ID; a different signed-in operator
runs ` + "`lockctl epoch approve ID`" + `, which shows it again and carries it out. Both
need an ID token from lockctl login (--id-token-file).

--direct advances at once, as one operator, through the older AdvanceEpoch call. Only
an arbiter without operator sign-in configured accepts it (it says so otherwise).

A coord cluster with no epoch records at all (new, or rebuilt empty) also needs
--above M: the highest epoch the region ever served. Take it from the audit archive,
a snapshot manifest, or the highest fencing token stored at a fenced resource shifted
right by 48 bits (a fence column value v gives epoch v >> 48). Use 0 only for a new region.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("expected") {
				return exitErr{exitUsage, fmt.Errorf("--expected: is required: the epoch lockctl status shows, 0 when it has no record")}
			}
			req := &adminv1.AdvanceEpochRequest{ExpectedEpoch: expected, Reason: why, Cluster: cluster}
			if cmd.Flags().Changed("above") {
				req.Above = &above
			}
			if !direct {
				return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
					r, err := admin.RequestEpochAdvance(ctx, &adminv1.RequestEpochAdvanceRequest{Advance: req})
					if err != nil {
						return err
					}
					g.printRequested(r, r.GetAction(), "epoch")
					return nil
				})
			}
			return g.call(func(ctx context.Context, c *lockclient.Client) error {
				r, err := adminv1.NewAdminServiceClient(c.Conn()).AdvanceEpoch(ctx, req)
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				printAdvance(r)
				return nil
			})
		},
	}
	adv.Flags().Uint32Var(&expected, "expected", 0, "the current epoch, as `lockctl status` shows it; 0 when it has no epoch record (required)")
	adv.Flags().StringVar(&why, "reason", "", "why the epoch is being advanced (required)")
	adv.Flags().StringVar(&cluster, "cluster", "", "an entity shard to advance (default: the coord cluster); it goes above the highest epoch it reached")
	adv.Flags().Uint32Var(&above, "above", 0, "only for a coord cluster with no epoch records: the highest epoch the region served")
	adv.Flags().BoolVar(&direct, "direct", false, "advance at once as one operator (only an arbiter without operator sign-in accepts it)")
	c.AddCommand(adv, approveCmd(g, "epoch_advance"), denyCmd(g, "epoch_advance"), listCmd(g, "epoch_advance"), showCmd(g, "epoch_advance"))
	return c
}

func printAdvance(r *adminv1.AdvanceEpochResponse) {
	from := fmt.Sprintf("epoch %d", r.GetPreviousEpoch())
	if r.GetPreviousEpoch() == 0 {
		from = "no epoch record"
	}
	fmt.Printf("epoch advanced from %s to %d for cluster %s at revision %d; deleted %d holds and %d waiters\n",
		from, r.GetEpoch(), r.GetClusterId(), r.GetRevision(), r.GetDeletedHolds(), r.GetDeletedWaiters())
}
