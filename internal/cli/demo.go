package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/internal/demo"
)

func newDemo() *cobra.Command {
	var (
		dsn string
		ttl time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch a paused holder overwrite newer data, then watch fencing stop it",
		Long: `Tell the story of a lease holder that is paused past its lease, with real
processes: worker A takes the lock, checks its lease, and is paused (SIGSTOP)
just before it writes; worker B takes over and writes; A resumes and writes.

Run 1 writes without fencing tokens: A's stale result overwrites B's.
Run 2 passes the token with every write: A's write is refused.

The demo starts its own server in a temporary directory. Without --dsn the
data lives in fence's built-in fenced key-value store; with --dsn in a
Postgres table (fence_demo_totals, created if missing).`,
		Example: `  fence demo
  fence demo --dsn postgres://postgres@127.0.0.1:5432/test`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			return demo.Run(cmd.Context(), demo.Config{DSN: dsn, Self: self, TTL: ttl}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dsn, "dsn", "", "Postgres DSN to run the story against a real table")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Second, "the workers' lease TTL")
	return cmd
}

// newDemoWorker is the hidden worker half of 'fence demo'.
func newDemoWorker() *cobra.Command {
	var cfg demo.WorkerConfig
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Hidden: true,
		Args:   usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := demo.Worker(cmd.Context(), cfg, cmd.InOrStdin(), cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("demo worker %s: %w", cfg.Name, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "", "")
	f.StringVar(&cfg.Lock, "lock", "", "")
	f.StringVar(&cfg.Name, "name", "", "")
	f.StringVar(&cfg.DSN, "dsn", "", "")
	f.Int64Var(&cfg.Amount, "amount", 0, "")
	f.DurationVar(&cfg.TTL, "ttl", time.Second, "")
	f.BoolVar(&cfg.Fenced, "fenced", false, "")
	return cmd
}
