package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
)

func newMembers(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List and change the nodes of a fence cluster",
		Example: `  fence members ls --server 127.0.0.1:7300,127.0.0.1:7310,127.0.0.1:7320
  fence members add node4 10.0.0.4:7302
  fence members remove node4
  fence members transfer node2`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List the members and the leader",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				members, by, err := c.Members(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tROLE\tSUFFRAGE")
				for _, m := range members {
					role := "follower"
					if m.Leader {
						role = "leader"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.ID, m.RaftAddr, role, m.Suffrage)
				}
				tw.Flush()
				fmt.Fprintf(cmd.ErrOrStderr(), "(as seen by %s)\n", by)
				return nil
			})
		},
	}, &cobra.Command{
		Use:     "add ID RAFT-ADDR",
		Short:   "Add a voter (usually not needed: start the node with --join)",
		Example: "  fence members add node4 10.0.0.4:7302",
		Args:    usage(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return c.AddMember(ctx, args[0], args[1])
			})
		},
	}, &cobra.Command{
		Use:     "remove ID",
		Short:   "Remove a member for good (stop its process afterwards)",
		Example: "  fence members remove node4",
		Args:    usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return c.RemoveMember(ctx, args[0])
			})
		},
	}, &cobra.Command{
		Use:     "transfer [ID]",
		Short:   "Hand leadership to another member (the most up-to-date one if no ID)",
		Example: "  fence members transfer node2\n  fence members transfer",
		Args:    usage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				id := ""
				if len(args) == 1 {
					id = args[0]
				}
				leader, err := c.TransferLeader(ctx, id)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "leader is now %s\n", leader)
				return nil
			})
		},
	})
	return cmd
}
