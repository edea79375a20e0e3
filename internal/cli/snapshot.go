package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/backup"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/server"
)

func newSnapshot(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a running cluster's state, inspect a backup, and seed a new cluster from one",
		Long: `A backup is a consistent copy of the replicated state — every lease (with
its secret: keep the file as private as a data dir), lock, token and fenced
key-value entry — as of one applied log index, taken online from the
leader, with a SHA-256 over the whole file.

A restore seeds a new data dir, which 'fence serve' then runs as a new
cluster of one (more members join it with --join). Tokens never repeat: the
old cluster may have gone on granting after the backup, so a restore
refuses to run without a token floor, and the restored cluster's first
grant gets a token above it.`,
		Example: `  fence snapshot save fence.backup
  fence snapshot status fence.backup
  fence snapshot restore fence.backup --data-dir /var/lib/fence --token-floor 5000
  fence serve --data-dir /var/lib/fence`,
	}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a consistent backup of the state to FILE, taken online from the leader (an admin call)",
		Long: `Write a consistent backup of the state to FILE, which must not exist. The
leader copies its state after a linearizable read, so the backup holds every
write acknowledged before the command started; the file is written beside
FILE, fsynced, checked, then moved into place (mode 0600). Like the other
admin calls it needs the admin token (--admin-token-file, $FENCE_ADMIN_TOKEN)
unless it runs on the server's machine, or the admin right under a policy.`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				b, err := c.Backup(ctx)
				if err != nil {
					return err
				}
				h := backup.Header{ClusterID: fmt.Sprintf("%016x", b.ClusterID), NodeID: b.NodeID, Index: b.Index, Term: b.Term,
					TakenAt: b.TakenAt, Token: b.Token, Leases: b.Leases, Locks: b.Locks, Version: b.Version}
				if err := backup.WriteFile(args[0], h, b.State); err != nil {
					return err
				}
				if _, _, err := backup.Open(args[0]); err != nil { // what was written reads back whole
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "saved %s: index %d, last token %d, %d leases, %d locks, %d bytes of state\n",
					args[0], b.Index, b.Token, b.Leases, b.Locks, len(b.State))
				return nil
			})
		},
	}
	var asJSON bool
	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Check a backup file and show what it holds",
		Long: `Check FILE (its SHA-256, its header, and that its state decodes) and show
where it was taken and what it holds. A damaged or cut-short file is an
error. --json prints the header as JSON.`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, _, err := backup.Open(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(h)
			}
			printHeader(cmd.OutOrStdout(), h)
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the header as JSON")
	cmd.AddCommand(save, offline(status), offline(newRestore()))
	return cmd
}

func newRestore() *cobra.Command {
	cfg := server.DefaultConfig()
	var floor, gap uint64
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR (--token-floor N | --token-gap N)",
		Short: "Seed a new data dir from a backup (then 'fence serve' it as a new cluster)",
		Long: `Seed DIR, which must be missing or empty, from the backup FILE: a new
cluster (a new cluster id) of one member, this node, whose state is the
backup's. Start it with 'fence serve --data-dir DIR' and the same --node-id,
then add members with --join. Restored leases live on as after a restart
(their holders can renew them here), restored locks keep their grants and
tokens.

Tokens must never repeat, and the old cluster may have granted more after
the backup was taken, so the restore needs a floor, and every token the new
cluster grants is above it:
  --token-floor N  N is the largest token the old cluster may have handed
                   out: its members' fence_last_token metric, or the
                   largest fence column of your fenced tables.
  --token-gap N    the old cluster granted at most N tokens after the
                   backup (its last token plus N is the floor): for when it
                   is gone and nothing else tells. Err on the large side;
                   tokens are 63-bit.
Two restores of one backup need a floor each: the second above what the
first cluster handed out.`,
		Example: `  fence snapshot restore fence.backup --data-dir /var/lib/fence --token-floor 5000
  fence snapshot restore fence.backup --data-dir d1 --node-id n1 --raft-addr 10.0.0.1:7302 --token-gap 10000000`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, st, err := backup.Open(args[0])
			if err != nil {
				return err
			}
			f, err := backup.Floor(st.Token(), floor, gap)
			if err != nil {
				return usageError(cmd, err)
			}
			if err := fsm.ValidName("node id", cfg.NodeID); err != nil {
				return usageError(cmd, fmt.Errorf("--node-id: %w", err))
			}
			addr := cfg.RaftAddr
			if cfg.AdvertiseRaftAddr != "" {
				addr = cfg.AdvertiseRaftAddr
			}
			st.RaiseToken(f)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			id, err := node.Seed(cfg.DataDir, cfg.NodeID, addr, st.Marshal(nil), log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: cluster %016x of one member, %s at %s; the next token is above %d (the backup's last was %d)\n"+
				"start it with: fence serve --data-dir %s --node-id %s (and its --raft-addr, certificates and other flags)\n",
				args[0], cfg.DataDir, id, cfg.NodeID, addr, f, h.Token, cfg.DataDir, cfg.NodeID)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.DataDir, "data-dir", "", "the new data dir (missing or empty)")
	fl.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "the --node-id the restored node will serve with")
	fl.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "the raft address it will serve on (recorded as its member address)")
	fl.StringVar(&cfg.AdvertiseRaftAddr, "advertise-raft-addr", "", "the raft address the others will dial, if not --raft-addr")
	fl.Uint64Var(&floor, "token-floor", 0, "the largest token the old cluster may have handed out")
	fl.Uint64Var(&gap, "token-gap", 0, "a bound on the tokens the old cluster granted after the backup")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// printHeader shows a backup's header for people.
func printHeader(w io.Writer, h backup.Header) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range [][2]string{
		{"cluster", h.ClusterID},
		{"taken by", h.NodeID},
		{"taken at", h.TakenAt.Format(time.RFC3339)},
		{"raft index", fmt.Sprint(h.Index)},
		{"raft term", fmt.Sprint(h.Term)},
		{"last token", fmt.Sprint(h.Token)},
		{"leases", fmt.Sprint(h.Leases)},
		{"locks", fmt.Sprint(h.Locks)},
		{"state", fmt.Sprintf("%d bytes, sha256 %s", h.Size, h.SHA256)},
		{"fence", h.Version},
		{"checksum", "ok"},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	tw.Flush()
}
