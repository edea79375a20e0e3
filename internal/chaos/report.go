package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is what a run did and found.
type Report struct {
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration"`
	Elapsed  time.Duration `json:"elapsed"`
	Fencing  bool          `json:"fencing"`

	Operations int `json:"operations"`
	Grants     int `json:"grants"`   // acknowledged to workers
	Expiries   int `json:"expiries"` // leases the servers expired
	Unknown    int `json:"unknown"`  // operations with an open outcome
	// StaleRefused counts writes refused for a stale token: the pauses hit.
	StaleRefused struct {
		Postgres   int `json:"postgres"`    // claims and writes, in a transaction or not
		PostgresTx int `json:"postgres_tx"` // of which writes inside a REPEATABLE READ transaction
		MySQL      int `json:"mysql"`
		MySQLTx    int `json:"mysql_tx"`
		// Serialization counts PostgreSQL's own refusals (SQLSTATE 40001)
		// of a transaction's write to a row changed since its snapshot.
		Serialization int `json:"serialization"`
		KV            int `json:"kv"`
	} `json:"stale_refused"`
	// Writes counts acknowledged row writes by store ("postgres", "mysql in tx", …).
	Writes map[string]int `json:"writes"`
	// LeaseTTLs counts the leases whose TTL the proxy saw granted (the
	// deadline check covers their holders).
	LeaseTTLs int          `json:"lease_ttls"`
	Replays   ReplayCounts `json:"replays"`
	// Terms counts elections won (Campaign acknowledged); Deposed the
	// proclaims refused because a newer term had written.
	Terms   int `json:"terms"`
	Deposed int `json:"deposed"`
	// ModeGrants counts the grants of the semaphore (Permits) and of the
	// read-write lock (Shared: readers, Exclusive: writers).
	ModeGrants struct {
		Permits   int `json:"permits"`
		Shared    int `json:"shared"`
		Exclusive int `json:"exclusive"`
	} `json:"mode_grants"`
	// LostUpdates counts acknowledged row increments that were overwritten.
	LostUpdates int         `json:"lost_updates"`
	Faults      FaultCounts `json:"faults"`

	Violations []Violation `json:"violations"`
	// Inconclusive lists checks that ran out of time: neither pass nor fail.
	Inconclusive []string `json:"inconclusive,omitempty"`
}

func (r *Report) add(vs ...Violation) { r.Violations = append(r.Violations, vs...) }

// Checks lists the violated checks, each once, sorted.
func (r *Report) Checks() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range r.Violations {
		if !seen[v.Check] {
			seen[v.Check] = true
			out = append(out, v.Check)
		}
	}
	sort.Strings(out)
	return out
}

// Print writes the summary and, for each violation (the first few of each
// check), its evidence.
func (r *Report) Print(w io.Writer) {
	f := r.Faults
	fmt.Fprintf(w, "seed %d, %v of faults (%v in all), fencing %v\n", r.Seed, r.Duration, r.Elapsed.Round(time.Second), r.Fencing)
	fmt.Fprintf(w, "  operations %d (open outcomes %d), grants %d, lease expiries %d\n", r.Operations, r.Unknown, r.Grants, r.Expiries)
	fmt.Fprintf(w, "  faults: worker pauses %v, worker kills %d, leader kills %d, follower kills %d, leader pauses %d, partitions %d, clock shifts %d\n",
		f.WorkerPauses, f.WorkerKills, f.LeaderKills, f.FollowerKill, f.LeaderPauses, f.Partitions, f.ClockShifts)
	fmt.Fprintf(w, "  faults: replays sent %d %v; answers %v\n", r.Replays.Sent, r.Replays.ByMethod, r.Replays.Answers)
	s := r.StaleRefused
	fmt.Fprintf(w, "  row writes acknowledged %v; leases with a known TTL %d\n", r.Writes, r.LeaseTTLs)
	fmt.Fprintf(w, "  stale writes refused: postgres %d (in tx %d, plus %d serialization failures), mysql %d (in tx %d), kv %d; lost updates %d\n",
		s.Postgres, s.PostgresTx, s.Serialization, s.MySQL, s.MySQLTx, s.KV, r.LostUpdates)
	fmt.Fprintf(w, "  elections: terms won %d, proclaims of deposed leaders refused %d\n", r.Terms, r.Deposed)
	fmt.Fprintf(w, "  semaphore permits granted %d; read-write lock: readers %d, writers %d\n", r.ModeGrants.Permits, r.ModeGrants.Shared, r.ModeGrants.Exclusive)
	for _, s := range r.Inconclusive {
		fmt.Fprintf(w, "  INCONCLUSIVE: %s\n", s)
	}
	fmt.Fprintf(w, "  violations: %d\n", len(r.Violations))
	shown := map[string]int{}
	for _, v := range r.Violations {
		if shown[v.Check]++; shown[v.Check] > 3 {
			continue
		}
		fmt.Fprintf(w, "  VIOLATION [%s] %s\n", v.Check, v.Detail)
		ops := v.Ops
		if len(ops) > 40 {
			fmt.Fprintf(w, "    (last 40 of %d operations)\n", len(ops))
			ops = ops[len(ops)-40:]
		}
		for _, o := range ops {
			fmt.Fprintf(w, "    %s\n", o)
		}
		if v.HTML != "" {
			fmt.Fprintf(w, "    visualisation: %s\n", v.HTML)
		}
	}
	if n := len(r.Violations); n > 0 {
		fmt.Fprintf(w, "  checks violated: %s\n", strings.Join(r.Checks(), "; "))
	}
}
