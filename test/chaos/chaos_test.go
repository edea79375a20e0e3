package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/chaos"
	"github.com/fencehq/fence/internal/dbtest"
	"github.com/fencehq/fence/internal/netlab"
)

// TestMain lets this test binary serve as the harness's worker process.
func TestMain(m *testing.M) {
	if os.Getenv(chaos.WorkerEnv) != "" {
		if err := chaos.RunWorkerFromEnv(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChaos carries out one run; the output directory is kept (and named)
// when the test fails.
func runChaos(t *testing.T, cfg chaos.Config, tags ...string) *chaos.Report {
	t.Helper()
	if err := netlab.Available(); err != nil {
		if os.Getenv("FENCE_REQUIRE_NETNS") == "1" {
			t.Fatal(err.Error() + " (FENCE_REQUIRE_NETNS=1)")
		}
		t.Skip(err)
	}
	dbtest.Open(t, dbtest.Postgres()) // starts PostgreSQL if it is down
	dbtest.Open(t, dbtest.MySQL())    // and MariaDB
	dir, err := os.MkdirTemp("", "fence-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("histories, logs and evidence kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	if cfg.FenceBinary, err = chaos.BuildFence(dir, tags...); err != nil {
		t.Fatal(err)
	}
	cfg.WorkerCommand = []string{os.Args[0]}
	cfg.PostgresURL = dbtest.Postgres().DSN
	cfg.MySQLURL = dbtest.MySQL().DSN
	cfg.OutDir = dir
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	var log strings.Builder
	cfg.Log = &log
	r, err := chaos.Run(context.Background(), cfg)
	t.Log(strings.TrimSpace(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	var sum strings.Builder
	r.Print(&sum)
	t.Log("\n" + sum.String())
	return r
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d
	}
	return def
}

// TestChaos is the short run CI does every time: every fault, three
// servers, and no violation allowed. FENCE_CHAOS_DURATION and
// FENCE_CHAOS_SEED override its length and seed.
func TestChaos(t *testing.T) {
	var seed uint64
	if v := os.Getenv("FENCE_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	r := runChaos(t, chaos.Config{Duration: envDuration(t, "FENCE_CHAOS_DURATION", 60*time.Second), Seed: seed, Fencing: true})
	if len(r.Violations) > 0 || len(r.Inconclusive) > 0 {
		t.Fatalf("seed %d: %d violations (%s), %d inconclusive checks", r.Seed, len(r.Violations), strings.Join(r.Checks(), "; "), len(r.Inconclusive))
	}
	if r.Grants == 0 || r.Expiries == 0 {
		t.Fatalf("the run did too little to prove anything: %d grants, %d expiries", r.Grants, r.Expiries)
	}
	if s := r.StaleRefused; s.Postgres+s.MySQL+s.Serialization+s.KV == 0 {
		t.Fatalf("seed %d: no stale write was refused: no pause landed between a holder's check and its write", r.Seed)
	}
}

// TestChaosControl turns fencing off: the same pauses must now lose updates,
// or the harness could not see what fencing prevents.
func TestChaosControl(t *testing.T) {
	// 45 s: with per-lock TTLs (some leases outlast most pauses) a 30 s run
	// lost 3–6 updates, too close to none.
	r := runChaos(t, chaos.Config{Duration: 45 * time.Second, Fencing: false, LocksOnly: true, Faults: []string{chaos.FaultPauseWorker}})
	if r.LostUpdates == 0 {
		t.Fatalf("seed %d: without fencing no update was lost: the harness cannot see the failure fencing prevents", r.Seed)
	}
}

// TestChaosPlantedBugs runs servers built with each planted bug: the
// harness must catch every one. A bug shows only when the faults land
// right (the deposed leader must answer a renewal from memory while
// another holder writes), so a run that misses it is followed by up to two
// more, with other seeds; all three missing fails.
func TestChaosPlantedBugs(t *testing.T) {
	for _, name := range chaos.BugNames() {
		t.Run(name, func(t *testing.T) {
			b := chaos.Bugs[name]
			var missed []string
			for range 3 {
				r := runChaos(t, chaos.Config{Duration: 30 * time.Second, Fencing: true, LocksOnly: true, Faults: b.Faults, Locks: b.Locks, Transports: b.Transports}, b.Tag)
				if by := b.CaughtBy(r); by != "" {
					t.Logf("planted bug %q caught by %q (after %d runs that missed it)", name, by, len(missed))
					return
				}
				missed = append(missed, fmt.Sprintf("seed %d: got %q", r.Seed, r.Checks()))
			}
			t.Fatalf("planted bug %q not caught in 3 runs; want a violation of %q: %s", name, b.Caught, strings.Join(missed, "; "))
		})
	}
}
