// Command chaos runs fence's fault-injection harness (package
// internal/chaos): three real servers in network namespaces, worker
// processes that lock, read-modify-write a PostgreSQL or MariaDB row (in a
// REPEATABLE READ transaction half the time) and the built-in key-value
// store under their fencing tokens, and a seeded schedule of pauses, kills,
// partitions, clock shifts and request replays; then it checks every history.
//
//	go run ./test/chaos --duration 10m --seed 42   # a long run (make chaos)
//	go run ./test/chaos --fencing=false           # control: must find lost updates
//	go run ./test/chaos --bug regrant             # a planted bug: must be caught
//
// It needs root (network and time namespaces), iproute2, PostgreSQL and
// MariaDB.
// Exit status: 0 when the run found what it should (no violation; for the
// control run and planted bugs, the expected one), 1 otherwise, 2 on bad
// flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencehq/fence/internal/chaos"
	"github.com/fencehq/fence/internal/dbtest"
)

func main() {
	if os.Getenv(chaos.WorkerEnv) != "" {
		if err := chaos.RunWorkerFromEnv(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker:", err)
			os.Exit(1)
		}
		return
	}
	var (
		cfg    chaos.Config
		faults string
		bug    string
	)
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long to inject faults")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the fault schedule (printed; reuse it to replay a run)")
	flag.IntVar(&cfg.Servers, "servers", 3, "servers: 3 (or 5) for a cluster, 1 for the single-node mode")
	flag.IntVar(&cfg.Workers, "workers", 8, "worker processes")
	flag.IntVar(&cfg.Locks, "locks", 3, "locks (each guards one row and one key)")
	flag.DurationVar(&cfg.TTL, "ttl", 1500*time.Millisecond, "the workers' lease TTL")
	flag.BoolVar(&cfg.Fencing, "fencing", true, "false: the control run, rows written without the token check")
	flag.BoolVar(&cfg.LocksOnly, "locks-only", false, "workers only lock rows: no elections, semaphores or read-write locks (the control and planted-bug runs)")
	flag.StringVar(&faults, "faults", "", "comma-separated faults (default all): "+strings.Join(chaos.AllFaults, ","))
	var stores, transports string
	flag.StringVar(&transports, "transports", "", "comma-separated transports, worker i taking the (i mod n)th (default all): "+strings.Join(chaos.Transports, ","))
	flag.StringVar(&stores, "stores", "", "comma-separated stores workers write (default all): "+chaos.StorePostgres+","+chaos.StoreMySQL)
	flag.StringVar(&bug, "bug", "", "run servers built with a planted bug: "+strings.Join(chaos.BugNames(), ", "))
	flag.StringVar(&cfg.OutDir, "out", "", "directory for histories, logs and evidence (default: a new temp dir)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chaos: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if faults != "" {
		cfg.Faults = strings.Split(faults, ",")
	}
	if stores != "" {
		cfg.Stores = strings.Split(stores, ",")
	}
	if transports != "" {
		cfg.Transports = strings.Split(transports, ",")
	}
	var tags []string
	if bug != "" {
		b, ok := chaos.Bugs[bug]
		if !ok {
			fmt.Fprintf(os.Stderr, "chaos: unknown bug %q (known: %s)\n", bug, strings.Join(chaos.BugNames(), ", "))
			os.Exit(2)
		}
		tags = append(tags, b.Tag)
		if faults == "" {
			cfg.Faults = b.Faults
		}
		if b.Locks != 0 {
			cfg.Locks = b.Locks
		}
		if transports == "" {
			cfg.Transports = b.Transports
		}
	}
	os.Exit(run(cfg, bug, tags))
}

func run(cfg chaos.Config, bug string, tags []string) int {
	var err error
	if cfg.OutDir == "" {
		if cfg.OutDir, err = os.MkdirTemp("", "fence-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
	}
	fmt.Printf("chaos: seed %d, output in %s\n", cfg.Seed, cfg.OutDir)
	if cfg.FenceBinary, err = chaos.BuildFence(cfg.OutDir, tags...); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	cfg.WorkerCommand = []string{self}
	pg := dbtest.Postgres()
	db, err := dbtest.Connect(pg, func(f string, a ...any) { fmt.Printf("chaos: "+f+"\n", a...) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	db.Close()
	cfg.PostgresURL = pg.DSN
	my := dbtest.MySQL()
	if db, err = dbtest.Connect(my, func(f string, a ...any) { fmt.Printf("chaos: "+f+"\n", a...) }); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	db.Close()
	cfg.MySQLURL = my.DSN
	cfg.Log = os.Stdout
	// Interrupted, terminated or hung up, the run stops its faults and its
	// processes before it exits (none is left running).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	r, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	r.Print(os.Stdout)
	switch {
	case bug != "":
		if by := chaos.Bugs[bug].CaughtBy(r); by != "" {
			fmt.Printf("planted bug %q caught by %q\n", bug, by)
			return 0
		}
		fmt.Printf("planted bug %q NOT caught (expected a violation of %q)\n", bug, chaos.Bugs[bug].Caught)
	case !cfg.Fencing:
		if r.LostUpdates > 0 {
			fmt.Printf("control run: without fencing, %d updates were lost, as expected\n", r.LostUpdates)
			return 0
		}
		fmt.Println("control run: no lost update found without fencing; the faults did not bite")
	case len(r.Violations) == 0 && len(r.Inconclusive) == 0:
		return 0
	}
	return 1
}
