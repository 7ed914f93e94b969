package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
)

func shardsCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "shards",
		Short: "Show the entity tier's shard map; add a shard (two operators: one requests, another approves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error {
				m, err := adminv1.NewAdminServiceClient(c.Conn()).ShardMap(ctx, &adminv1.ShardMapRequest{})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(m)
					return nil
				}
				fmt.Printf("version     %d\nshards      %s\n", m.GetVersion(), strings.Join(m.GetShards(), ", "))
				if m.GetAdding() != "" {
					fmt.Printf("adding      %s (in progress: its ranges take no new grants; `lockctl shards add %s --reason ...` resumes it)\n", m.GetAdding(), m.GetAdding())
				}
				var spare []string
				for _, s := range m.GetConfigured() {
					if !slices.Contains(m.GetShards(), s) && s != m.GetAdding() {
						spare = append(spare, s)
					}
				}
				if len(spare) > 0 {
					fmt.Printf("not in map  %s (configured on this arbiter; add with `lockctl shards add NAME --reason ...`)\n", strings.Join(spare, ", "))
				}
				return nil
			})
		},
	}
	var why string
	add := &cobra.Command{
		Use:   "add NAME --reason TEXT",
		Short: "Add an entity shard to the map, moving about 1/N of the ranges to it; a different operator approves",
		Long: `Add an entity shard to the map. Every arbiter of the region must already
have the shard's endpoints (--shard NAME=ENDPOINTS). Ranges moving to the new
shard take no new grants until the move completes, which waits for their
holders to release or expire, deletes their durable waiters and advances the
new shard's epoch above every other's.

Like an epoch advance it is a two-person action wherever the arbiter verifies
operators' sign-in: add records a request and prints its ID, and a different
signed-in operator runs ` + "`lockctl shards approve ID`" + `, which shows it again and
carries it out, printing the new map. Both need an ID token from lockctl login
(--id-token-file). An approval that runs out of time waiting for holders
leaves the request pending: approving it again resumes the add.

On an arbiter without operator sign-in that opts in to one-person calls
(--allow-one-person-epoch-advance, trials) add runs at once as one operator,
printing each step as it happens (one JSON object per line with -o json);
Ctrl-C stops waiting, and running the command again resumes the add.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := g.addShardDirect(&adminv1.AddShardRequest{Shard: args[0], Reason: why})
			if _, meta := reason.Info(err); meta["cause"] != "two_person_required" {
				return err
			}
			// The arbiter verifies operators' sign-in: request it.
			return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
				r, err := admin.RequestShardAdd(ctx, &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: args[0], Reason: why}})
				if err != nil {
					return err
				}
				g.printRequested(r, r.GetAction(), "shards")
				return nil
			})
		},
	}
	add.Flags().StringVar(&why, "reason", "", "why the shard is added (required where the add is two-person; kept in the request)")
	c.AddCommand(add, approveCmd(g, "shard_add"), denyCmd(g, "shard_add"), listCmd(g, "shard_add"), showCmd(g, "shard_add"))
	return c
}

// addShardDirect runs the one-person AddShard, printing each step as it
// comes; the arbiter refuses it (cause two_person_required) once it
// verifies operators' sign-in, before anything moves.
func (g *globals) addShardDirect(req *adminv1.AddShardRequest) error {
	return g.until(func(ctx context.Context, c *lockclient.Client) error {
		stream, err := adminv1.NewAdminServiceClient(c.Conn()).AddShard(ctx, req)
		if err != nil {
			return err
		}
		for {
			step, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if g.json() {
				b, _ := protojson.Marshal(step)
				fmt.Println(string(b))
				continue
			}
			fmt.Printf("%-9s %s\n", step.GetPhase(), step.GetDetail())
		}
	})
}

// printShardAdded is what an approved shard add did.
func printShardAdded(r *adminv1.ShardAddResult) {
	for _, step := range r.GetSteps() {
		fmt.Printf("%-9s %s\n", step.GetPhase(), step.GetDetail())
	}
	fmt.Printf("shard map version %d over %s\n", r.GetVersion(), strings.Join(r.GetShards(), ", "))
}
