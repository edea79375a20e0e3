package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
)

// hotJSON is the --json shape of 'fence hot' (stable field names for scripts).
type hotJSON struct {
	WindowSeconds float64       `json:"window_seconds"`
	Locks         []hotLockJSON `json:"locks"`
}

// hotLockJSON is one lock of hotJSON; counts are decayed over the window.
type hotLockJSON struct {
	Name        string  `json:"name"`
	Score       float64 `json:"score"`
	ScoreError  float64 `json:"score_error"`
	Grants      float64 `json:"grants"`
	Waits       float64 `json:"waits"`
	WaitSeconds float64 `json:"wait_seconds"`
	Expirations float64 `json:"expirations"`
	Waiters     int     `json:"waiters"`
}

func newHot(g *globals) *cobra.Command {
	var asJSON bool
	var n int
	var prefix string
	cmd := &cobra.Command{
		Use:   "hot",
		Short: "Show the busiest locks lately",
		Long: `hot shows the locks with the most grants plus queued acquires lately, hottest
first, from the leader's bounded hot-lock sketch (the top few thousand names,
whatever the number of names). Counts decay with the log's clock: each is
about the events of the last WINDOW (5 minutes), so they are fractional.
WAIT is the time waited by acquires granted after a wait; EXPIRED counts
grants ended because their holder's lease expired; WAITERS wait now.`,
		Example: "  fence hot\n  fence hot -n 5 --prefix jobs/\n  fence hot --json | jq '.locks[0]'",
		Args:    usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				locks, window, err := c.HotLocks(ctx, n, prefix)
				if err != nil {
					return err
				}
				return printHot(cmd.OutOrStdout(), locks, window, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVarP(&n, "limit", "n", 20, "show at most this many locks (at most 1000)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only locks whose names start with this")
	return cmd
}

// printHot writes the hot locks as a table or as JSON.
func printHot(w io.Writer, locks []client.HotLock, window time.Duration, asJSON bool) error {
	if asJSON {
		out := hotJSON{WindowSeconds: window.Seconds(), Locks: make([]hotLockJSON, len(locks))}
		for i, l := range locks {
			out.Locks[i] = hotLockJSON{Name: l.Name, Score: l.Score, ScoreError: l.ScoreError, Grants: l.Grants, Waits: l.Waits,
				WaitSeconds: l.WaitSeconds, Expirations: l.Expirations, Waiters: l.Waiters}
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LOCK\tSCORE\tGRANTS\tWAITS\tWAIT\tEXPIRED\tWAITERS\t(counts over about the last %s)\n", window)
	for _, l := range locks {
		wait := time.Duration(l.WaitSeconds * float64(time.Second)).Round(time.Millisecond)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\t%.1f\t%d\t\n", l.Name, l.Score, l.Grants, l.Waits, wait, l.Expirations, l.Waiters)
	}
	return tw.Flush()
}
