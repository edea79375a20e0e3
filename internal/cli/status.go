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
	// DelayLeftSeconds, while delayed, is how long until the lock goes to
	// its first waiter.
	DelayLeftSeconds *float64 `json:"delay_left_seconds,omitempty"`
	// Queue is who waits, first first (status only; ls leaves it out).
	Queue []waiterJSON `json:"queue,omitempty"`
	// Index is the raft index of the state read: fence watch --from index+1
	// misses no later change.
	Index uint64 `json:"index"`
	// Permits: 1 for a mutex or read-write lock, N for a semaphore.
	Permits       int         `json:"permits"`
	Grants        []grantJSON `json:"grants"`
	SharedWaiters int         `json:"shared_waiters"`
	// HeldForSeconds is how long the holder has held it (absent when
	// unknown or not held).
	HeldForSeconds *float64 `json:"held_for_seconds,omitempty"`
}

// grantJSON is the --json shape of one grant of a lock.
type grantJSON struct {
	HolderLease    uint64   `json:"holder_lease,omitempty"`
	HolderOwner    string   `json:"holder_owner,omitempty"`
	Token          uint64   `json:"token"`
	Slot           int      `json:"slot"`
	Shared         bool     `json:"shared"`
	Delayed        bool     `json:"delayed"`
	TTLLeftSeconds float64  `json:"ttl_left_seconds"`
	HeldForSeconds *float64 `json:"held_for_seconds,omitempty"`
}

// seconds is d in seconds for a JSON field that is absent when d is 0
// (unknown).
func seconds(d time.Duration) *float64 {
	if d == 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}

// waiterJSON is one lease in a lock's queue.
type waiterJSON struct {
	Lease  uint64 `json:"lease"`
	Owner  string `json:"owner"`
	Shared bool   `json:"shared,omitempty"` // it waits to read
}

func toJSON(l client.LockInfo) lockJSON {
	j := lockJSON{Name: l.Name, Held: l.Held(), HolderLease: l.HolderLease, HolderOwner: l.HolderOwner,
		Token: l.Token, TTLLeftSeconds: l.TTLLeft.Seconds(), Waiters: l.Waiters, Delayed: l.Delayed, Index: l.Index,
		Permits: max(l.Permits, 1), Grants: []grantJSON{}, SharedWaiters: l.SharedWaiters, HeldForSeconds: seconds(l.HeldFor)}
	if l.Delayed {
		left := l.DelayLeft.Seconds()
		j.DelayLeftSeconds = &left
	}
	for _, w := range l.Queue {
		j.Queue = append(j.Queue, waiterJSON{Lease: w.Lease, Owner: w.Owner, Shared: w.Shared})
	}
	for _, g := range l.Grants {
		j.Grants = append(j.Grants, grantJSON{HolderLease: g.HolderLease, HolderOwner: g.HolderOwner, Token: g.Token, Slot: g.Slot,
			Shared: g.Shared, Delayed: g.Delayed, TTLLeftSeconds: g.TTLLeft.Seconds(), HeldForSeconds: seconds(g.HeldFor)})
	}
	return j
}

// multiHolder reports whether l is a semaphore or is read-shared: a lock
// status shows grant by grant.
func multiHolder(l client.LockInfo) bool {
	return l.Permits > 1 || len(l.Grants) > 1 || len(l.Grants) == 1 && l.Grants[0].Shared
}

// printGrants writes a semaphore's or a read-write lock's grants, one a line.
func printGrants(w io.Writer, l client.LockInfo) {
	if l.Permits > 1 {
		fmt.Fprintf(w, "%s: semaphore of %d permits, %d taken, %d waiting\n", l.Name, l.Permits, len(l.Grants), l.Waiters)
	} else {
		fmt.Fprintf(w, "%s: read-write lock, %d readers, %d waiting (%d to read)\n", l.Name, len(l.Grants), l.Waiters, l.SharedWaiters)
	}
	for _, g := range l.Grants {
		what := fmt.Sprintf("slot %d", g.Slot)
		if g.Shared {
			what = "reader"
		}
		if g.Delayed {
			fmt.Fprintf(w, "  %s: in lock-delay after its holder's lease expired (last token %d), %v left\n", what, g.Token, g.DelayLeft.Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(w, "  %s: lease #%d (%s), token %d, %sTTL left %s\n", what, g.HolderLease, g.HolderOwner, g.Token, heldFor(g.HeldFor), g.TTLLeft.Round(time.Millisecond))
	}
}

// heldFor is "held for D, " or, when unknown (0), nothing.
func heldFor(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return "held for " + d.Round(time.Millisecond).String() + ", "
}

func newStatus(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status NAME",
		Short:   "Show who holds a lock (every permit of a semaphore, every reader), its token, TTL left and who waits, in order",
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
				case multiHolder(l):
					printGrants(w, l)
				case l.Held():
					fmt.Fprintf(w, "%s: held by lease #%d (%s), token %d, %sTTL left %s, %d waiting\n",
						l.Name, l.HolderLease, l.HolderOwner, l.Token, heldFor(l.HeldFor), l.TTLLeft.Round(time.Millisecond), l.Waiters)
				case l.Delayed:
					fmt.Fprintf(w, "%s: free but in lock-delay after its holder's lease expired (last token %d), lock-delay %v left, %d waiting\n",
						l.Name, l.Token, l.DelayLeft.Round(time.Millisecond), l.Waiters)
				default:
					fmt.Fprintf(w, "%s: free\n", l.Name)
				}
				for i, q := range l.Queue { // %+q: owners are anyone's labels
					reader := ""
					if q.Shared {
						reader = ", to read"
					}
					fmt.Fprintf(w, "  %d. lease #%d (owner %+q)%s\n", i+1, q.Lease, q.Owner, reader)
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
			if len(l.Grants) > 1 { // a semaphore's or readers' other grants: fence status NAME lists them
				holder += fmt.Sprintf(" (+%d)", len(l.Grants)-1)
			}
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
