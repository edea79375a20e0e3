package chaos

import (
	"testing"

	"github.com/fencehq/fence/internal/histcheck"
)

// relockHistory: w1 holds lock-0 (token 1) while w2 waits; w1 relocks at
// 30 (recorded as a release of token 1 and an acquire, both called at 30):
// w2 is granted token 2 in the same step, releases at 50, and w1's relock
// returns token relocked at 60.
func relockHistory(relocked uint64) []*Op {
	return []*Op{
		{Client: "w1", Seq: 1, Kind: "acquire", Lock: "lock-0", Token: 1, Call: 0, Return: 10, Outcome: OK, ValidUntil: 1000},
		{Client: "w2", Seq: 1, Kind: "acquire", Lock: "lock-0", Token: 2, Call: 20, Return: 40, Outcome: OK, ValidUntil: 1000},
		{Client: "w1", Seq: 2, Kind: "release", Lock: "lock-0", Token: 1, Call: 30, Return: 60, Outcome: OK},
		{Client: "w1", Seq: 3, Kind: "acquire", Lock: "lock-0", Token: relocked, Call: 30, Return: 60, Outcome: OK, ValidUntil: 1000},
		{Client: "w2", Seq: 2, Kind: "release", Lock: "lock-0", Token: 2, Call: 50, Return: 55, Outcome: OK},
	}
}

// TestRelockHistory: the checks take a worker's relock as a release and an
// acquire called together: a relock that hands the lock to the waiter and
// gets a new token passes them all; one that answers the old token, or a
// token below the waiter's, breaks the lock model and the token order.
func TestRelockHistory(t *testing.T) {
	checks := func(ops []*Op) []Violation {
		r := &Report{}
		vs := r.linearizable("lock service", histcheck.Locks.ToModel(), lockHistory(ops), t.TempDir())
		vs = append(vs, tokenOrder(ops)...)
		vs = append(vs, windows(ops)...)
		if len(r.Inconclusive) > 0 {
			t.Fatalf("inconclusive: %v", r.Inconclusive)
		}
		return vs
	}
	if vs := checks(relockHistory(3)); len(vs) != 0 {
		t.Fatalf("a correct relock: %+v", vs)
	}
	for _, bad := range []uint64{1, 2} {
		if vs := checks(relockHistory(bad)); len(vs) == 0 {
			t.Errorf("a relock answered token %d (w2 holds 2): no violation", bad)
		}
	}
}
