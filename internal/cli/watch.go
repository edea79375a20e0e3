package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
)

// eventJSON is the --json shape of a lock event (one object per line).
type eventJSON struct {
	Index            uint64  `json:"index"`
	Type             string  `json:"type"`
	Name             string  `json:"name"`
	Lease            uint64  `json:"lease,omitempty"`
	Owner            string  `json:"owner,omitempty"`
	Token            uint64  `json:"token,omitempty"`
	Cause            string  `json:"cause,omitempty"`
	LockDelaySeconds float64 `json:"lock_delay_seconds,omitempty"`
	Value            *string `json:"value,omitempty"`  // written: the value (text; Go's JSON writes invalid UTF-8 as U+FFFD)
	Slot             int     `json:"slot,omitempty"`   // a semaphore's permit (granted, released, lock-delay-started)
	Shared           bool    `json:"shared,omitempty"` // a reader's grant
}

func newWatch(g *globals) *cobra.Command {
	var asJSON bool
	var from uint64
	cmd := &cobra.Command{
		Use:   "watch NAME|PREFIX/",
		Short: "Print what happens to a lock, or to every lock under a prefix, as it happens",
		Long: `watch prints each change of a lock: grants (lease, owner, token), releases
and why (released, expired, revoked, force-released), waiters joining and
leaving, lock-delays starting and ending, each with the raft index it was
applied at. A NAME that ends in "/" (or --prefix) watches every lock under
it; "" with --prefix watches every lock. It runs until interrupted, and moves
to another member, resuming where it was, if its member goes away.

--from INDEX starts at a raft index: the "index" that 'fence status --json'
printed, + 1, misses no change after that status ('fence ls --watch' does
the same for every lock). An index the member no longer keeps ends the
watch with an error (exit 1): read the status again.`,
		Example: "  fence watch jobs/nightly\n  fence watch jobs/ --json | jq -c 'select(.type == \"granted\")'\n  fence watch --prefix ''",
		Args:    usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix, _ := cmd.Flags().GetBool("prefix")
			name := args[0]
			opts := []client.WatchOption{client.WatchFrom(from)}
			if prefix || strings.HasSuffix(name, "/") {
				opts = append(opts, client.WatchPrefix())
			}
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return follow(ctx, c, cmd.OutOrStdout(), name, asJSON, opts...)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event")
	cmd.Flags().Bool("prefix", false, "NAME is a prefix: watch every lock whose name starts with it")
	cmd.Flags().Uint64Var(&from, "from", 0, "start at this raft index (default: with the next change)")
	return cmd
}

// follow prints the events of a watch until it ends; an interrupt (ctx
// ending) is a normal end.
func follow(ctx context.Context, c *client.Client, out io.Writer, name string, asJSON bool, opts ...client.WatchOption) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := c.Watch(ctx, name, opts...)
	if err != nil {
		return err
	}
	defer w.Close()
	for e := range w.Events() {
		if err := printEvent(out, e, asJSON); err != nil {
			return err
		}
	}
	if err := w.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// printEvent writes one event as a line of text or of JSON.
func printEvent(w io.Writer, e client.LockEvent, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(eventJSON{Index: e.Index, Type: e.Type.String(), Name: e.Name, Lease: e.Lease, Owner: e.Owner,
			Token: e.Token, Cause: e.Cause.String(), LockDelaySeconds: e.LockDelay.Seconds(), Value: writtenValue(e), Slot: e.Slot, Shared: e.Shared})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(w, "%d %s\n", e.Index, describeEvent(e))
	return err
}

// writtenValue is the value of a written event as text (nil for the others).
func writtenValue(e client.LockEvent) *string {
	if e.Type != client.Written {
		return nil
	}
	v := string(e.Value)
	return &v
}

// describeEvent says what an event means, in words.
func describeEvent(e client.LockEvent) string {
	who := fmt.Sprintf("lease #%d (%s)", e.Lease, e.Owner)
	grant := "" // a reader's grant, or a semaphore's permit past slot 0
	switch {
	case e.Shared:
		grant = " (shared)"
	case e.Slot > 0:
		grant = fmt.Sprintf(" (slot %d)", e.Slot)
	}
	switch e.Type {
	case client.Granted:
		return fmt.Sprintf("%s: granted to %s, token %d%s", e.Name, who, e.Token, grant)
	case client.Released:
		return fmt.Sprintf("%s: token %d of %s ended: %s", e.Name, e.Token, who, e.Cause)
	case client.WaiterJoined:
		return fmt.Sprintf("%s: %s waits", e.Name, who)
	case client.WaiterLeft:
		return fmt.Sprintf("%s: %s stopped waiting (%s)", e.Name, who, e.Cause)
	case client.LockDelayStarted:
		return fmt.Sprintf("%s: lock-delay of %s after token %d expired", e.Name, e.LockDelay, e.Token)
	case client.LockDelayEnded:
		return fmt.Sprintf("%s: lock-delay after token %d ended", e.Name, e.Token)
	case client.Written:
		return fmt.Sprintf("%s: written with token %d: %q", e.Name, e.Token, e.Value)
	}
	return fmt.Sprintf("%s: %s", e.Name, e.Type)
}
