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

// lockJSON is the --json shape of a lock (stable field names for scripts).
type lockJSON struct {
	Name           string  `json:"name"`
	Held           bool    `json:"held"`
	HolderLease    uint64  `json:"holder_lease,omitempty"`
	HolderOwner    string  `json:"holder_owner,omitempty"`
	Token          uint64  `json:"token"`
	TTLLeftSeconds float64 `json:"ttl_left_seconds"`
	Waiters        int     `json:"waiters"`
	Delayed        bool    `json:"delayed"`
	// Index is the raft index of the state read: fence watch --from index+1
	// misses no later change.
	Index uint64 `json:"index"`
}

func toJSON(l client.LockInfo) lockJSON {
	return lockJSON{Name: l.Name, Held: l.Held(), HolderLease: l.HolderLease, HolderOwner: l.HolderOwner,
		Token: l.Token, TTLLeftSeconds: l.TTLLeft.Seconds(), Waiters: l.Waiters, Delayed: l.Delayed, Index: l.Index}
}

func newStatus(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status NAME",
		Short:   "Show who holds a lock, its token, TTL left and waiters",
		Example: "  fence status jobs/nightly\n  fence status jobs/nightly --json | jq .token",
		Args:    usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				l, err := c.Status(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), toJSON(l))
				}
				w := cmd.OutOrStdout()
				switch {
				case l.Held():
					fmt.Fprintf(w, "%s: held by lease #%d (%s), token %d, TTL left %s, %d waiting\n",
						l.Name, l.HolderLease, l.HolderOwner, l.Token, l.TTLLeft.Round(time.Millisecond), l.Waiters)
				case l.Delayed:
					fmt.Fprintf(w, "%s: free but in lock-delay after its holder's lease expired (last token %d), %d waiting\n", l.Name, l.Token, l.Waiters)
				default:
					fmt.Fprintf(w, "%s: free\n", l.Name)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newLs(g *globals) *cobra.Command {
	var asJSON, watch bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List locks that are held, delayed or waited for",
		Long: `ls lists the locks that are held, delayed or waited for. With --watch it
then prints every change of every lock as it happens (as 'fence watch' does),
starting right after the list: nothing is missed in between.`,
		Example: "  fence ls\n  fence ls --json | jq '.[] | select(.waiters > 0)'\n  fence ls --watch",
		Args:    usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				locks, index, err := c.ListWithIndex(ctx)
				if err != nil {
					return err
				}
				if err := printLocks(cmd.OutOrStdout(), locks, asJSON); err != nil || !watch {
					return err
				}
				return follow(ctx, c, cmd.OutOrStdout(), "", asJSON, client.WatchPrefix(), client.WatchFrom(index+1))
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (with --watch: the list, then one object per event)")
	cmd.Flags().BoolVar(&watch, "watch", false, "after the list, print each change as it happens, until interrupted")
	return cmd
}

// printLocks writes the list as a table or as JSON.
func printLocks(w io.Writer, locks []client.LockInfo, asJSON bool) error {
	if asJSON {
		out := make([]lockJSON, len(locks))
		for i, l := range locks {
			out[i] = toJSON(l)
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tHOLDER\tTOKEN\tTTL LEFT\tWAITERS")
	for _, l := range locks {
		holder, ttl := "-", "-"
		if l.Held() {
			holder, ttl = fmt.Sprintf("#%d %s", l.HolderLease, l.HolderOwner), l.TTLLeft.Round(time.Millisecond).String()
		} else if l.Delayed {
			holder = "(lock-delay)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\n", l.Name, holder, l.Token, ttl, l.Waiters)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
