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
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
)

func shardsCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "shards",
		Short: "Show the entity tier's shard map",
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
					fmt.Printf("adding      %s (in progress: its ranges take no new grants; `lockctl shards add %s` resumes it)\n", m.GetAdding(), m.GetAdding())
				}
				var spare []string
				for _, s := range m.GetConfigured() {
					if !slices.Contains(m.GetShards(), s) && s != m.GetAdding() {
						spare = append(spare, s)
					}
				}
				if len(spare) > 0 {
					fmt.Printf("not in map  %s (configured on this arbiter; add with `lockctl shards add NAME`)\n", strings.Join(spare, ", "))
				}
				return nil
			})
		},
	}
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Add an entity shard to the map, moving about 1/N of the ranges to it (operators only)",
		Long: `Add an entity shard to the map. Every arbiter of the region must already
have the shard's endpoints (--shard NAME=ENDPOINTS). Ranges moving to the new
shard take no new grants until the move completes, which waits for their
holders to release or expire; Ctrl-C stops waiting, and running the command
again resumes the add. Each step is printed as it happens (one JSON object
per line with -o json).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.until(func(ctx context.Context, c *lockclient.Client) error {
				stream, err := adminv1.NewAdminServiceClient(c.Conn()).AddShard(ctx, &adminv1.AddShardRequest{Shard: args[0]})
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
		},
	}
	c.AddCommand(add)
	return c
}
