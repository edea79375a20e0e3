package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
FENCE_TTL: the lease's TTL) for eval. FENCE_SIGNED_TOKEN is the signed
statement of the grant for storage that verifies it (fencing.Verifier); it
is set only if the server has a token key.

If the lock is held, it waits up to --wait (default 10m, as 'fence run'),
then exits 75; --wait 0 fails at once.

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
			shown := showWaiting(cmd.ErrOrStderr(), c, args[0]) // waiting.go: where the wait stands, while it waits
			d, err := c.LockDetached(lctx, args[0], ttl, wait > 0, append(opts, shown.option())...)
			shown.stop()
			if err != nil {
				return notAcquired(args[0], wait, err)
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
	f.DurationVar(&wait, "wait", defaultWait, "how long to wait if the lock is held (0: fail at once)")
	positive(f, "ttl")
	f.DurationVar(&lockDelay, "lock-delay", 0, "after this lease expires, keep the lock from others this long (default: the server's)")
	f.StringVar(&owner, "owner", "", "label others see (default host/pid)")
	return cmd
}

func newUnlock(g *globals) *cobra.Command {
	var lease string
	cmd := &cobra.Command{
		Use:   "unlock [NAME]",
		Short: "Release a lock taken with 'fence lock'",
		Long: `Release the lock taken by 'fence lock'. What identifies it is its lease
secret (--lease, or $FENCE_LEASE as exported by 'fence lock'): a name alone
would not say whose grant to end (to take a lock from its holder, an admin
uses 'fence release --force'). NAME, if given, must be the lock that lease
holds ($FENCE_LOCK): a guard against a second 'fence lock' in the same shell
having replaced FENCE_LEASE.

If the lease holds no lock any more, it exits 3 and says so: it was
unlocked before (a second unlock, as from 'trap "fence unlock" EXIT' after
an explicit one), its TTL ran out (then the script outlived its TTL and
another holder may have had the lock since), or an admin force-released it.
The server forgets ended leases, so it cannot tell which.`,
		Example: `  eval "$(fence lock jobs/backup --ttl 15m)"
  trap 'fence unlock' EXIT
  ...
  fence unlock                      # uses $FENCE_LEASE
  fence unlock jobs/backup          # the same, checked against $FENCE_LOCK
  fence unlock --lease 9f3c...      # explicit`,
		Args: usage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			fromEnv := lease == ""
			if fromEnv {
				lease = os.Getenv("FENCE_LEASE")
			}
			if lease == "" {
				return usageError(cmd, errors.New("no lease given: unlock releases by the lease secret, --lease or $FENCE_LEASE (eval the output of 'fence lock': it exports it), "+
					"never by name alone, which would not say whose grant to end (an admin takes a lock from its holder with 'fence release --force NAME')"))
			}
			if held := os.Getenv("FENCE_LOCK"); len(args) == 1 && fromEnv && held != "" && held != args[0] {
				return usageError(cmd, fmt.Errorf("$FENCE_LEASE is the lease of %q ($FENCE_LOCK), not of %q; nothing was released "+
					"(to hold two locks in one shell, keep each one's FENCE_LEASE and pass it with --lease)", held, args[0]))
			}
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				released, err := c.UnlockDetached(ctx, lease)
				if err == nil && len(args) == 1 && !slices.Contains(released, args[0]) {
					return fmt.Errorf("the lease given held %s, not %q; it is released now", strings.Join(released, ", "), args[0])
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&lease, "lease", "", "lease secret printed by 'fence lock' (default $FENCE_LEASE)")
	return cmd
}

// notAcquired is the error of lock or run when the lock was not granted:
// exit 75 if it was held (and the wait, if any, ran out).
func notAcquired(name string, wait time.Duration, err error) error {
	switch {
	case errors.Is(err, client.ErrLocked), errors.Is(err, client.ErrRanRecently):
		return &exitError{ExitNotAcquired, err}
	case errors.Is(err, context.DeadlineExceeded):
		return &exitError{ExitNotAcquired, fmt.Errorf("lock %q is still held after waiting %v (--wait)", name, wait)}
	}
	return err
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
