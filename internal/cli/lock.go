package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
)

func newLock(g *globals) *cobra.Command {
	var (
		ttl, wait, lockDelay time.Duration
		owner                string
	)
	cmd := &cobra.Command{
		Use:   "lock NAME",
		Short: "Take a lock for a shell script, held for --ttl without renewal",
		Long: `Take the lock NAME under a lease of its own that nothing renews: it is held
for --ttl unless released earlier with 'fence unlock'. Prints shell
assignments (FENCE_LOCK, FENCE_TOKEN, FENCE_SIGNED_TOKEN, FENCE_LEASE,
FENCE_TTL) for eval. FENCE_SIGNED_TOKEN is the signed statement of the grant
for storage that verifies it (fencing.Verifier); it is set only if the
server has a token key.

Pick a TTL longer than the script can run; if the script may run longer,
use 'fence run', which renews the lease and stops the script if it is lost.
FENCE_LEASE is a secret: whoever has it can release the lock.`,
		Example: `  eval "$(fence lock jobs/backup --ttl 15m)" || exit 1
  pg_dump ... && upload --fence-token "$FENCE_TOKEN"
  fence unlock`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []client.Option
			if owner != "" {
				opts = append(opts, client.WithOwner(owner))
			}
			if cmd.Flags().Changed("lock-delay") {
				opts = append(opts, client.WithLockDelay(lockDelay))
			}
			ctx := cmd.Context()
			c, err := g.dial(ctx, opts...)
			if err != nil {
				return err
			}
			defer c.Close()
			lctx, cancel := context.WithTimeout(ctx, max(wait, time.Second))
			defer cancel()
			d, err := c.LockDetached(lctx, args[0], ttl, wait > 0, opts...)
			if err != nil {
				if errors.Is(err, client.ErrLocked) || errors.Is(err, context.DeadlineExceeded) {
					return &exitError{ExitNotAcquired, fmt.Errorf("could not acquire %q: %w", args[0], err)}
				}
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "export FENCE_LOCK=%s\n", shellQuote(d.Name))
			fmt.Fprintf(out, "export FENCE_TOKEN=%d\n", d.Token)
			if d.SignedToken != "" {
				fmt.Fprintf(out, "export FENCE_SIGNED_TOKEN=%s\n", d.SignedToken) // URL-safe base64: nothing to quote
			}
			fmt.Fprintf(out, "export FENCE_LEASE=%s\n", d.Secret)
			fmt.Fprintf(out, "export FENCE_TTL=%s\n", d.TTL)
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", 10*time.Minute, "how long the lock is held unless unlocked")
	f.DurationVar(&wait, "wait", 0, "how long to wait if the lock is held (0: fail at once)")
	f.DurationVar(&lockDelay, "lock-delay", 0, "after this lease expires, keep the lock from others this long (default: the server's)")
	f.StringVar(&owner, "owner", "", "label others see (default host/pid)")
	return cmd
}

func newUnlock(g *globals) *cobra.Command {
	var lease string
	cmd := &cobra.Command{
		Use:   "unlock",
		Short: "Release a lock taken with 'fence lock'",
		Long: `Release the lock taken by 'fence lock', identified by its lease secret
(--lease, or $FENCE_LEASE as exported by 'fence lock'). Exits 76 if the lease
had already expired: the script outlived its TTL and may have overlapped
another holder.`,
		Example: `  eval "$(fence lock jobs/backup --ttl 15m)"
  ...
  fence unlock                      # uses $FENCE_LEASE
  fence unlock --lease 9f3c...      # explicit`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lease == "" {
				lease = os.Getenv("FENCE_LEASE")
			}
			if lease == "" {
				return &exitError{ExitUsage, errors.New("no lease given: pass --lease or eval the output of 'fence lock' first (it exports FENCE_LEASE)")}
			}
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.UnlockDetached(ctx, lease); err != nil {
					if errors.Is(err, client.ErrExpired) {
						return &exitError{ExitLeaseLost, err}
					}
					return err
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&lease, "lease", "", "lease secret printed by 'fence lock' (default $FENCE_LEASE)")
	return cmd
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
