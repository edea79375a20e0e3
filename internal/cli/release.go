package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
)

func newRelease(g *globals) *cobra.Command {
	var (
		force  bool
		reason string
		token  uint64
	)
	cmd := &cobra.Command{
		Use:   "release --force NAME",
		Short: "Admin: take a lock away from its holder",
		Long: `Take the lock NAME away from its holder: its current grant ends (named by
its token, so a retry never ends the next holder's grant) and the next waiter
gets it at once. The holder's lease and its other locks live on. The holder
finds out at its next renewal and must stop ('fence run' kills its command).
The server logs the call with --reason.

A semaphore's permits and a read-write lock's readers are grants of their
own: name the one to end with --token (fence status NAME lists them).

A holder releases its own lock by finishing ('fence run'), 'fence unlock', or
Lease.Release in the client library; this command is for stuck holders.`,
		Example: `  fence release --force jobs/nightly --reason "host-7 hung, INC-2231"
  fence release --force exports --token 41 --reason "slot 2's host hung"`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return &exitError{ExitUsage, errors.New("release takes a lock away from its holder; pass --force to confirm (to release your own lock, use 'fence unlock')")}
			}
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				release := c.ForceRelease
				if token != 0 {
					release = func(ctx context.Context, name, reason string) (client.LockInfo, []string, error) {
						return c.ForceReleaseGrant(ctx, name, token, reason)
					}
				}
				revoked, released, err := release(ctx, args[0], reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "released %s (token %d) from lease #%d (%s); that lease and its other locks live on\n",
					strings.Join(released, ", "), revoked.Token, revoked.HolderLease, revoked.HolderOwner)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "confirm taking the lock from its holder")
	cmd.Flags().StringVar(&reason, "reason", "", "why (logged by the server)")
	cmd.Flags().Uint64Var(&token, "token", 0, "end the grant with this token (a semaphore's permit, a reader's grant; default: the lock's one grant)")
	return cmd
}
