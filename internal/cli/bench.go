package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/internal/bench"
)

func newBench(g *globals) *cobra.Command {
	cfg := bench.Config{Workload: bench.Uncontended, Clients: 16, Duration: 10 * time.Second, MaxOps: 10_000_000, TTL: 30 * time.Second, Window: 64}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Put load on a fence server or cluster and measure throughput and latency",
		Long: `Run one workload against --server and report operations per second and
latency percentiles (HDR histogram) per operation:

  uncontended  each client locks and releases its own lock (cycles/s)
  contended    all clients wait in line for one lock (handoffs/s)
  renew-heavy  each client renews one lease on a KeepAlive stream, --window in flight
  many-leases  clients create leases as fast as they can (they expire after --ttl)
  mixed        half the clients run uncontended cycles, half renew

Every run stops at --duration or --max-ops, whichever comes first. Each
client has its own connection and session. Point it at a server you may
load: it creates locks named bench/… and leases owned by fence-bench.`,
		Example: `  fence bench --workload uncontended --clients 64 --duration 10s
  fence bench --workload contended --clients 16 --json
  fence bench --workload renew-heavy --clients 8 --window 128 --server 127.0.0.1:7300,127.0.0.1:7310,127.0.0.1:7320`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Servers = g.addrs()
			tlsCfg, err := g.tlsConfig()
			if err != nil {
				return err
			}
			cfg.TLS = tlsCfg
			if err := cfg.Validate(); err != nil {
				return &exitError{ExitUsage, err}
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s: %d clients, %.1fs: %d ops (%s), %.0f/s, %d errors\n",
				res.Workload, res.Clients, res.Seconds, res.Ops, res.Unit, res.OpsPerSec, res.Errors)
			if res.FirstErr != "" {
				fmt.Fprintf(w, "first error: %s\n", res.FirstErr)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "op\tcount\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\t")
			for _, op := range res.OpNames() {
				l := res.Latency[op]
				fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", op, l.Count, l.P50, l.P90, l.P99, l.P999, l.Max)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Workload, "workload", cfg.Workload, "one of "+strings.Join(bench.Workloads, ", "))
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "stop after this long")
	f.Int64Var(&cfg.MaxOps, "max-ops", cfg.MaxOps, "stop after this many operations")
	f.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "TTL of the leases the run creates")
	f.IntVar(&cfg.Window, "window", cfg.Window, "renewals in flight per stream (renew-heavy, mixed)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
