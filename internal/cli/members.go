package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the members, the leader, and each member's health as the leader sees it",
		Long: `List the members as the leader sees them: ID, client (gRPC) address,
raft address, role,
suffrage (Voter, or Learner while a new member catches up), health (ok: the
leader heard from it within an election timeout; unreachable otherwise),
how long ago the leader last heard from it, the highest log index known in
its log (match) and how many entries it is behind the commit index (lag).
--json prints the same as a JSON array.`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				members, by, err := c.Members(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printMembersJSON(cmd.OutOrStdout(), members, by)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tCLIENT ADDRESS\tRAFT ADDRESS\tROLE\tSUFFRAGE\tHEALTH\tLAST CONTACT\tMATCH\tLAG")
				for _, m := range members {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", m.ID, orDash(m.GRPCAddr), m.RaftAddr, memberRole(m), m.Suffrage, memberHealth(m), memberContact(m), m.Match, m.Lag)
				}
				tw.Flush()
				fmt.Fprintf(cmd.ErrOrStderr(), "(as seen by %s)\n", by)
				return nil
			})
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.AddCommand(ls, &cobra.Command{
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

func memberRole(m client.Member) string {
	if m.Leader {
		return "leader"
	}
	return "follower"
}

func memberHealth(m client.Member) string {
	if m.Active {
		return "ok"
	}
	return "unreachable"
}

func memberContact(m client.Member) string {
	switch {
	case m.Leader && m.LastContact == 0:
		return "-"
	case m.LastContact < 0:
		return "never"
	}
	return m.LastContact.Round(time.Millisecond).String() + " ago"
}

// memberJSON is one member in 'fence members ls --json'.
type memberJSON struct {
	ID              string  `json:"id"`
	GRPCAddr        string  `json:"grpc_addr"` // "" until the member has announced it
	RaftAddr        string  `json:"raft_addr"`
	Role            string  `json:"role"`
	Suffrage        string  `json:"suffrage"`
	Healthy         bool    `json:"healthy"`
	LastContactSecs float64 `json:"last_contact_seconds"` // -1: never
	Match           uint64  `json:"match_index"`
	Lag             uint64  `json:"lag"`
	SeenBy          string  `json:"seen_by"`
}

func printMembersJSON(w io.Writer, members []client.Member, by string) error {
	out := make([]memberJSON, 0, len(members))
	for _, m := range members {
		secs := -1.0
		if m.LastContact >= 0 {
			secs = m.LastContact.Seconds()
		}
		out = append(out, memberJSON{ID: m.ID, GRPCAddr: m.GRPCAddr, RaftAddr: m.RaftAddr, Role: memberRole(m), Suffrage: m.Suffrage, Healthy: m.Active,
			LastContactSecs: secs, Match: m.Match, Lag: m.Lag, SeenBy: by})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// orDash shows an empty value as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
