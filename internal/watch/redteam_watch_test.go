package watch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// Red team: Watch.

// TestRedTeamWatchScanDoesNotStallPublish: "the apply path never blocks on
// a watcher". A watcher that starts at the oldest kept index with a name
// that matches nothing scans the whole history; it must not hold the
// history's lock (which Publish, on the apply path, needs) for the whole
// scan. Any caller can open such watches, one after another.
func TestRedTeamWatchScanDoesNotStallPublish(t *testing.T) {
	const kept = 400_000
	h := New(2*kept, 0) // room for the Publishes below: nothing is dropped
	for i := uint64(1); i <= kept; i++ {
		name := "busy"
		if i == kept {
			name = "quiet" // the one batch the watchers below find, after looking at every other
		}
		h.Publish(i, []fsm.Result{granted(name, i)})
	}
	coldScan := func() time.Duration {
		w, err := h.Watch("quiet", false, 1)
		if err != nil {
			t.Error(err)
			return 0
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if b, err := w.Next(ctx, time.Hour); err != nil || b.Index != kept {
			t.Errorf("found index %d (%v), want %d", b.Index, err, kept)
		}
		return time.Since(start)
	}
	scan := coldScan()
	for range 2 {
		scan = min(scan, coldScan())
	}
	if scan < 2*time.Millisecond {
		t.Skipf("a full scan takes only %v here: too fast to tell", scan)
	}

	stop := make(chan struct{})
	scanning := make(chan struct{})
	go func() {
		defer close(scanning)
		for range 2000 { // until stopped (bounded)
			select {
			case <-stop:
				return
			default:
			}
			coldScan()
		}
	}()
	var waits []time.Duration
	index := uint64(kept)
	for range 200 {
		index++
		start := time.Now()
		h.Publish(index, []fsm.Result{granted("busy", index)})
		waits = append(waits, time.Since(start))
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	<-scanning
	slices.Sort(waits)
	// The median, not the worst: a GC pause or a busy machine can delay
	// any one Publish.
	if median := waits[len(waits)/2]; median > scan/10 {
		t.Fatalf("half the Publishes waited %v or more for watchers that scan (a full scan takes %v): the apply path blocks on watchers",
			median, scan)
	}
	t.Logf("Publish: median %v, worst %v; a full scan %v", waits[len(waits)/2], waits[len(waits)-1], scan)
}
