package node

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/fencehq/fence/internal/planted"
)

// TestSimulation runs the deterministic simulation over many seeds, on 3 and
// 5 nodes. FENCE_SIM_SEEDS sets how many (default 16), FENCE_SIM_SEED the
// first; a failure prints the seed and the events before it, and the same
// seed replays the same run.
func TestSimulation(t *testing.T) {
	if planted.Any {
		t.Skip("a planted bug is compiled in: TestSimulationFindsThePlantedBug runs instead")
	}
	seeds := envUint(t, "FENCE_SIM_SEEDS", 16)
	first := envUint(t, "FENCE_SIM_SEED", 1)
	for i := range seeds {
		seed := first + i
		nodes := 3 + 2*int(seed%2)
		t.Run(fmt.Sprintf("seed=%d/nodes=%d", seed, nodes), func(t *testing.T) {
			s := runSim(t, simConfig{seed: seed, nodes: nodes, duration: 20 * time.Second, clients: 4})
			if s.check.failed() {
				t.Fatalf("seed %d: %v\n--- the events before it:\n%s\nreplay: FENCE_SIM_SEED=%d FENCE_SIM_SEEDS=1 go test ./internal/node -run TestSimulation",
					seed, s.check.errs, s.report(), seed)
			}
			t.Logf("%d entries applied, %d acknowledged, %d client calls", len(s.check.canon), len(s.check.acks), len(s.check.history))
		})
	}
}

// TestSimulationLazyHardState runs the simulation on logs whose
// SetHardState syncs nothing, not even a new term or vote: core.persist
// alone must make a vote durable before its MsgVoteResp leaves, or a crash
// lets a node vote twice in a term (the checker's election safety).
// FENCE_SIM_SEEDS sets how many seeds (default 8).
func TestSimulationLazyHardState(t *testing.T) {
	if planted.Any {
		t.Skip("a planted bug is compiled in: TestSimulationFindsThePlantedBug runs instead")
	}
	seeds := envUint(t, "FENCE_SIM_SEEDS", 8)
	first := envUint(t, "FENCE_SIM_SEED", 1)
	for i := range seeds {
		seed := first + i
		s := runSim(t, simConfig{seed: seed, nodes: 3 + 2*int(seed%2), duration: 20 * time.Second, clients: 4, lazyHardState: true})
		if s.check.failed() {
			t.Fatalf("seed %d, lazy SetHardState: %v\n--- the events before it:\n%s", seed, s.check.errs, s.report())
		}
	}
}

// TestSimulationFindsThePlantedBug runs, in a build with a planted bug
// (a fence_bug_* tag), seeds until the simulation reports a violation, and
// fails if none does within FENCE_SIM_SEEDS (default 32). With
// FENCE_SIM_COUNT=1 it runs every seed and reports how many found it.
func TestSimulationFindsThePlantedBug(t *testing.T) {
	if !planted.Any {
		t.Skip("no planted bug compiled in (build with a fence_bug_* tag)")
	}
	seeds := envUint(t, "FENCE_SIM_SEEDS", 32)
	first := envUint(t, "FENCE_SIM_SEED", 1)
	count := os.Getenv("FENCE_SIM_COUNT") == "1"
	found := 0
	for i := range seeds {
		seed := first + i
		s := runSim(t, simConfig{seed: seed, nodes: 3 + 2*int(seed%2), duration: 20 * time.Second, clients: 4})
		if !s.check.failed() {
			continue
		}
		found++
		if !count {
			t.Logf("found by seed %d (the %d. tried), at %.1fs simulated: %v", seed, i+1, s.now.Seconds(), s.check.errs[0])
			return
		}
	}
	if count {
		t.Logf("%d of %d seeds found the planted bug", found, seeds)
	}
	if found == 0 {
		t.Fatalf("no violation in %d seeds: the simulation misses the planted bug", seeds)
	}
}

// TestSimulationReplaysExactly runs one seed twice and compares everything
// the runs applied and traced: a seed is a complete recipe.
func TestSimulationReplaysExactly(t *testing.T) {
	run := func() string {
		s := runSim(t, simConfig{seed: 7, nodes: 5, duration: 5 * time.Second, clients: 3})
		return fmt.Sprintf("%v|%d|%s", len(s.check.canon), len(s.check.acks), s.report())
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("the same seed ran differently:\n%s\n---\n%s", a, b)
	}
}

// runSim runs one simulation with crypto/rand (raft's election jitter) drawn
// from the seed too.
func runSim(t *testing.T, cfg simConfig) *sim {
	cryptotest.SetGlobalRandom(t, cfg.seed)
	s := newSim(cfg)
	s.run()
	return s
}

func envUint(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}
