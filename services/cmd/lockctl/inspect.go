package main

import (
	"context"
	"fmt"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/spf13/cobra"
)

func inspectCmd(g *globals) *cobra.Command {
	var class string
	c := &cobra.Command{
		Use:   "inspect KEY [--class C]",
		Short: "Show who holds KEY (never the token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error { return inspect(ctx, g, c, args[0], class) })
		},
	}
	c.Flags().StringVar(&class, "class", "", "the key's lock class: its tier decides the cluster (the default class when empty)")
	return c
}

func inspect(ctx context.Context, g *globals, c *lockclient.Client, key, class string) error {
	r, err := c.Inspect(ctx, key, class)
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
	fmt.Printf("%s is held\n  holder   %s\n", r.GetKey(), h.GetIdentity())
	if h.GetInstance() != "" {
		fmt.Printf("  instance %s\n", h.GetInstance())
	}
	fmt.Printf("  session  %d\n  class    %s\n  since    %s (%s ago)\n",
		h.GetSessionId(), h.GetClass(),
		h.GetSince().AsTime().Format("2006-01-02 15:04:05Z07:00"), ago(h.GetSince().AsTime()))
	if h.GetRemainingTtl() != nil {
		fmt.Printf("  expires  in %s unless renewed\n", h.GetRemainingTtl().AsDuration())
	}
	return nil
}
