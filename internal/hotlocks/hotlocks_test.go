package hotlocks

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"
)

func names(locks []Lock) []string {
	var out []string
	for _, l := range locks {
		out = append(out, l.Name)
	}
	return out
}

// Names seen more than N/K times of N events stay tracked through a
// stream of one-off names many times K long, their true counts between
// score − error and score (the space-saving guarantee); each newcomer
// inherits the lowest score as its error.
func TestHeavyNamesSurviveEviction(t *testing.T) {
	s := New(8, time.Hour)
	for i := range 10_000 {
		if i%4 == 0 {
			s.Granted("hot", 0)
		}
		if i%5 == 0 {
			s.WaitStarted("warm", 0)
		}
		s.Granted("once-"+strconv.Itoa(i), 0)
	}
	if s.Len() != 8 {
		t.Fatalf("tracks %d names, want 8", s.Len())
	}
	top := s.Top(2, 0, nil)
	if fmt.Sprint(names(top)) != "[hot warm]" {
		t.Fatalf("top 2 = %v, want [hot warm]", names(top))
	}
	// 14,500 events over K = 8: hot (2,500) and warm (2,000) are above 1,812.
	for i, f := range []float64{2500, 2000} {
		if l := top[i]; l.Score < f || l.Score-l.Error > f {
			t.Errorf("%s: score %g, error %g; true count %g is not within", l.Name, l.Score, l.Error, f)
		}
	}
	for _, l := range s.Top(8, 0, nil)[2:] {
		if l.Error == 0 || l.Score != l.Error+1 { // each one-off came in over a full sketch, once
			t.Errorf("one-off %+v: want score = error + 1, error > 0", l)
		}
	}
}

// Counts decay with the log's clock: an event Tau ago counts 1/e; wait
// time and expirations are kept only for tracked names.
func TestDecayAndUnscoredEvents(t *testing.T) {
	s := New(4, time.Minute)
	s.Granted("a", 0)
	s.Waited("a", 2*time.Second, 0)
	s.Expired("untracked", 0) // not scored: not tracked either
	s.Granted("b", time.Minute)
	top := s.Top(10, time.Minute, nil)
	if fmt.Sprint(names(top)) != "[b a]" || s.Len() != 2 {
		t.Fatalf("top %v (tracked %d), want [b a]", names(top), s.Len())
	}
	if a := top[1]; math.Abs(a.Grants-1/math.E) > 1e-12 || math.Abs(a.WaitSeconds-2/math.E) > 1e-12 {
		t.Errorf("a a minute later: %+v, want grants 1/e and wait 2/e", a)
	}
	// Far later (past the renormalization), the order and ratios hold.
	later := 300 * time.Minute
	s.Granted("a", later)
	top = s.Top(10, later, func(name string) bool { return name == "a" })
	if len(top) != 1 || math.Abs(top[0].Grants-1) > 1e-9 {
		t.Errorf("a after renormalizing: %+v", top)
	}
}
