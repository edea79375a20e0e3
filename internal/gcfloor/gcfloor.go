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
package gcfloor

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Percent returns the GOGC that makes a live heap of live bytes grow to
// floor before the next collection (heap goal = live × (1 + GOGC/100)),
// and never less than 100, Go's default.
func Percent(live, floor uint64) int {
	if live == 0 || live >= floor/2 {
		return 100
	}
	return int((floor - live) * 100 / live)
}

// Keep adjusts GOGC every interval until stop is called, unless the
// environment sets GOGC (the operator's choice wins; Keep then does
// nothing). GOMEMLIMIT still applies: the runtime collects at the limit
// whatever GOGC says.
func Keep(floor uint64, interval time.Duration) (stop func()) {
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
			if want := Percent(sample[0].Value.Uint64(), floor); 10*abs(want-current) > current {
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
