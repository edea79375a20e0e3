package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
)

func newElect(g *globals) *cobra.Command {
	var (
		h               holdFlags
		value           string
		observe, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "elect NAME [flags] -- CMD [ARGS...] | elect NAME --observe",
		Short: "Run a command while this host leads an election, or follow its leaders",
		Long: `Campaign in the election NAME and, once elected, run CMD while this host
leads: the leader's --value (an address, say) is published for everyone who
asks 'fence elect NAME --observe' or calls client.Leader/Observe. The
candidates wait in line (first come, first elected); fence elect waits as
long as it takes (interrupt it to stop campaigning).

CMD runs exactly as under 'fence run': it gets FENCE_LOCK (the election's
name), FENCE_TOKEN (the term's fencing token: larger for every later leader;
pass it to every write), FENCE_SIGNED_TOKEN, FENCE_TTL and FENCE_VALUE (the
value proclaimed). If renewals keep failing, fence stops CMD before another
host can be elected (SIGTERM --grace before the local deadline, SIGKILL at
it); after a pause of fence itself, it kills CMD at once. When CMD ends,
fence resigns and the next candidate is elected at once.

With --observe, fence prints the current leader (if any) and every new
leader or value, with its token, until interrupted; the tokens never go down.

An election is the lock NAME plus the fenced key NAME (the value, written
with the leader's token): do not write that key otherwise.

Exit codes: CMD's own when it finishes; 76 if the leadership was lost and CMD
was stopped; 130 if interrupted (SIGINT, SIGTERM, SIGHUP) while campaigning
(it leaves the line at once); 69 if no server could be reached; 2 for bad
usage; 1 for other errors.`,
		Example: `  # run the scheduler on one host at a time; the others wait to take over
  fence elect services/scheduler --value "$(hostname):8080" -- ./scheduler

  # who leads, and every change
  fence elect services/scheduler --observe
  fence elect services/scheduler --observe --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			campaignFlags := []string{"value", "ttl", "grace", "lock-delay", "owner"}
			switch {
			case observe && slices.ContainsFunc(campaignFlags, cmd.Flags().Changed):
				return &exitError{ExitUsage, fmt.Errorf("--observe does not campaign: it takes none of --%s", strings.Join(campaignFlags, ", --"))}
			case asJSON && !observe:
				return &exitError{ExitUsage, errors.New("--json goes with --observe (a campaign's output is its command's)")}
			case observe && len(args) == 1 && dash < 0:
				return nil
			case observe:
				return &exitError{ExitUsage, errors.New("usage: fence elect NAME --observe (no command: an observer does not campaign)")}
			case dash != 1 || len(args) < 2:
				return &exitError{ExitUsage, errors.New("usage: fence elect NAME [flags] -- CMD [ARGS...] (put -- before the command), or fence elect NAME --observe")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if observe {
				c, err := g.dial(cmd.Context())
				if err != nil {
					return err
				}
				defer c.Close()
				return observeLeaders(cmd.Context(), c, cmd.OutOrStdout(), args[0], asJSON)
			}
			opts, err := h.options(cmd)
			if err != nil {
				return err
			}
			return lead(cmd, g, args[0], value, args[1:], &h, opts)
		},
	}
	h.register(cmd)
	f := cmd.Flags()
	f.StringVar(&value, "value", "", "what this host publishes while it leads (default: its owner label, host/pid)")
	f.BoolVar(&observe, "observe", false, "print the leaders of NAME as they change, instead of campaigning")
	f.BoolVar(&asJSON, "json", false, "with --observe: one JSON object per leader")
	return cmd
}

// lead campaigns in the election name and runs argv while leading.
func lead(cmd *cobra.Command, g *globals, name, value string, argv []string, h *holdFlags, opts []client.Option) error {
	ctx := cmd.Context()
	c, err := g.dial(ctx, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	if value == "" {
		value = h.owner
	}
	if value == "" {
		host, _ := os.Hostname()
		value = host + "/" + strconv.Itoa(os.Getpid())
	}
	in := catchInterrupts(ctx)
	defer in.stop()
	var ld *client.Leadership
	err = in.outcome(fmt.Sprintf("campaigning in %q", name), func(ctx context.Context) (err error) {
		ld, err = c.Campaign(ctx, name, value, opts...)
		return err
	}, func(ctx context.Context) error { return ld.Resign(ctx) })
	if err != nil {
		return err
	}
	return runHolding(cmd, ld.Lease(), "elected leader of", argv, h.ttl, h.grace, false, "FENCE_VALUE="+value)
}

// leaderJSON is the --observe --json shape of a leader (one object per line).
type leaderJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Token uint64 `json:"token"`
	Lease uint64 `json:"lease"`
	Owner string `json:"owner"`
}

// observeLeaders prints the leaders of the election name until interrupted.
func observeLeaders(ctx context.Context, c *client.Client, out io.Writer, name string, asJSON bool) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := c.Observe(ctx, name)
	if err != nil {
		return err
	}
	defer o.Close()
	for l := range o.Leaders() {
		if asJSON {
			b, err := json.Marshal(leaderJSON(l))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s\n", b)
			continue
		}
		// The value is quoted (as fence watch does): whoever campaigns chooses
		// it, and a newline or a terminal escape must not forge a line.
		fmt.Fprintf(out, "%s: %q leads (lease #%d, %s), token %d\n", l.Name, l.Value, l.Lease, l.Owner, l.Token)
	}
	if err := o.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
