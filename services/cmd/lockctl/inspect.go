package main

import (
	"context"
	"fmt"

	"github.com/lockplane/lockplane/services/lockclient"
	"github.com/spf13/cobra"
)

func inspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show who holds KEY (never the token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error { return inspect(ctx, g, c, args[0]) })
		},
	}
}

func inspect(ctx context.Context, g *globals, c *lockclient.Client, key string) error {
	r, err := c.Inspect(ctx, key)
	if err != nil {
		return err
	}
	if g.json() {
		printProto(r)
		return nil
	}
	if !r.GetHeld() {
		fmt.Printf("%s is free\n", r.GetKey())
		return nil
	}
	h := r.GetHolder()
	fmt.Printf("%s is held\n  holder   %s\n  session  %d\n  class    %s\n  since    %s (%s ago)\n",
		r.GetKey(), h.GetIdentity(), h.GetSessionId(), h.GetClass(),
		h.GetSince().AsTime().Format("2006-01-02 15:04:05Z07:00"), ago(h.GetSince().AsTime()))
	if h.GetRemainingTtl() != nil {
		fmt.Printf("  expires  in %s unless renewed\n", h.GetRemainingTtl().AsDuration())
	}
	return nil
}
