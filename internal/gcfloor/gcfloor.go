// Package gcfloor keeps the garbage collector's heap goal from falling
// below a floor. A fence server allocates on every call but holds a small
// heap (tens of MiB until it has many leases); with GOGC's default of 100
// its heap goal is then twice that, and it collects every few milliseconds
// under load (the collector's own work was 5–10 % of a leader's CPU in
// peerbench's profiles, and as much again in allocation assists).
// Keep raises GOGC while the live heap is small, so the heap may grow to
// the floor before a collection, and gives GOGC back its default once the
// live heap is half the floor or more. It is the Go GC guide's "memory
// floor", done with SetGCPercent instead of a ballast allocation.
//
// Keep also caps the headroom of a large heap: once the live heap is
// larger than the headroom, GOGC is lowered so that the heap grows by at
// most the headroom before a collection (never below MinPercent), instead
// of to twice the live data. A node holding a million leases (about
// 500 MiB live on a leader) then stays under 1 GiB, a snapshot included,
// at the cost of collecting more often.
package gcfloor

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// MinPercent is the lowest GOGC the headroom cap sets: below it a large
// live heap would be collected almost all the time (such a node needs more
// memory, not more collections).
const MinPercent = 25

// Percent returns the GOGC for a live heap of live bytes (heap goal =
// live × (1 + GOGC/100)): while live is below half the floor, the GOGC
// that makes it grow to floor before the next collection; once live is
// above headroom (0: no cap), the one that makes it grow by headroom, but
// at least MinPercent; else 100, Go's default.
func Percent(live, floor, headroom uint64) int {
	switch {
	case live == 0:
		return 100
	case live < floor/2:
		return int((floor - live) * 100 / live)
	case headroom > 0 && live > headroom:
		return max(MinPercent, int(headroom*100/live))
	}
	return 100
}

// Keep adjusts GOGC every interval until stop is called, unless the
// environment sets GOGC (the operator's choice wins; Keep then does
// nothing). GOMEMLIMIT still applies: the runtime collects at the limit
// whatever GOGC says.
func Keep(floor, headroom uint64, interval time.Duration) (stop func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		t := time.NewTicker(interval)
		defer t.Stop()
		current := 100
		for {
			metrics.Read(sample)
			// Changed only when it moves by a tenth: the live heap moves a
			// little at every collection.
			if want := Percent(sample[0].Value.Uint64(), floor, headroom); 10*abs(want-current) > current {
				debug.SetGCPercent(want)
				current = want
			}
			select {
			case <-t.C:
			case <-done:
				debug.SetGCPercent(100)
				return
			}
		}
	}()
	return func() { close(done); <-ended }
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
