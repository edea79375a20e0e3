// Command stages reads the stage traces of one run of fence built with the
// tag fence_stagetrace (internal/stagetrace: one file per node) and prints,
// for each stage, the median time after the entry's first "ready" (its
// proposal on the leader), on the leader and on the first follower to reach
// it. Run one client against the cluster so that entries do not overlap:
//
//	go build -tags fence_stagetrace -o /tmp/fence-st ./cmd/fence
//	FENCE_STAGETRACE_DIR=/tmp/st /tmp/fence-st serve …   # three nodes
//	fence bench --workload uncontended --clients 1 --duration 10s --server …
//	cd bench && go run ./cmd/stages /tmp/st
package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// order is the stages as a commit passes them.
var order = []string{"ready", "send-app", "deliver-app", "step-app", "write-start", "write-done", "deliver-resp", "step-resp", "apply"}

type event struct {
	node  int
	at    int64
	stage string
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: stages DIR (the FENCE_STAGETRACE_DIR of one run)")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "stages-*.txt"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "stages: no stages-*.txt in %s\n", os.Args[1])
		os.Exit(1)
	}
	byIndex := map[uint64][]event{}
	for node, f := range files {
		if err := read(f, node, byIndex); err != nil {
			fmt.Fprintln(os.Stderr, "stages:", err)
			os.Exit(1)
		}
	}
	// For each entry, in time order: t0 is its first "ready" (the leader's),
	// the leader the node that had it; each stage's time is its first
	// occurrence on the leader, and on any other node.
	leader, follower := map[string][]float64{}, map[string][]float64{}
	entries := 0
	for _, evs := range byIndex {
		slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
		first := slices.IndexFunc(evs, func(e event) bool { return e.stage == "ready" })
		if first < 0 {
			continue
		}
		t0, lead := evs[first].at, evs[first].node
		entries++
		seen := map[string]bool{}
		for _, e := range evs {
			key := fmt.Sprint(e.node == lead, e.stage)
			if seen[key] {
				continue
			}
			seen[key] = true
			d := float64(e.at-t0) / float64(time.Microsecond)
			if e.node == lead {
				leader[e.stage] = append(leader[e.stage], d)
			} else {
				follower[e.stage] = append(follower[e.stage], d)
			}
		}
	}
	fmt.Printf("%d entries, %d nodes; median µs after the entry's first ready (a stage seen for under 1 %% of the entries: -)\n", entries, len(files))
	fmt.Printf("%-13s %9s %9s\n", "stage", "leader", "follower")
	for _, st := range order {
		fmt.Printf("%-13s %9s %9s\n", st, median(leader[st], entries), median(follower[st], entries))
	}
}

// read adds one node's file to byIndex, in time order.
func read(path string, node int, byIndex map[uint64][]event) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return fmt.Errorf("%s:%d: want \"<ns> <stage> <index>\", got %q", path, line, sc.Text())
		}
		at, err1 := strconv.ParseInt(fs[0], 10, 64)
		idx, err2 := strconv.ParseUint(fs[2], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%s:%d: bad numbers in %q", path, line, sc.Text())
		}
		byIndex[idx] = append(byIndex[idx], event{node: node, at: at, stage: fs[1]})
	}
	return sc.Err()
}

// median of xs, or "-" if they are under 1 % of the entries (stray ones:
// the entries of an election, say).
func median(xs []float64, entries int) string {
	if len(xs) == 0 || len(xs)*100 < entries {
		return "-"
	}
	slices.Sort(xs)
	return strconv.FormatFloat(xs[len(xs)/2], 'f', 1, 64)
}
