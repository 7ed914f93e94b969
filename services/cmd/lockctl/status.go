package main

import (
	"context"
	"fmt"
	"strings"

	adminv1 "github.com/lockplane/lockplane/services/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/lockclient"
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
	if st.GetSealed() {
		flag := ""
		if cluster != "" {
			flag = " --cluster " + cluster
		}
		sealed = fmt.Sprintf("YES: minted for cluster %s; no grants until `lockctl epoch advance%s --expected %d`", st.GetEpochClusterId(), flag, st.GetEpoch())
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
	fmt.Printf("cluster   %s\nepoch     %d\nid        %s\nsealed    %s\nquorum    %s\nrevision  %d\narbiter   %s\n",
		name, st.GetEpoch(), st.GetClusterId(), sealed, quorum, st.GetRevision(), st.GetArbiter())
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
	c := &cobra.Command{Use: "epoch", Short: "Epoch administration (operators only)"}
	var expected uint32
	var why, cluster string
	adv := &cobra.Command{
		Use:   "advance --expected N --reason TEXT [--cluster NAME]",
		Short: "Advance the epoch from N to N+1, binding it to the current cluster and deleting every hold",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error {
				r, err := adminv1.NewAdminServiceClient(c.Conn()).AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: expected, Reason: why, Cluster: cluster})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				fmt.Printf("epoch advanced to %d for cluster %s at revision %d; deleted %d holds and %d waiters\n",
					r.GetEpoch(), r.GetClusterId(), r.GetRevision(), r.GetDeletedHolds(), r.GetDeletedWaiters())
				return nil
			})
		},
	}
	adv.Flags().Uint32Var(&expected, "expected", 0, "the current epoch, as `lockctl status` shows it (required)")
	adv.Flags().StringVar(&why, "reason", "", "why the epoch is being advanced (required)")
	adv.Flags().StringVar(&cluster, "cluster", "", "an entity shard to advance (default: the coord cluster); it goes above the highest epoch it reached")
	c.AddCommand(adv)
	return c
}
