package watch

import (
	"context"
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
	h := New(kept, 0)
	for i := uint64(1); i <= kept; i++ {
		h.Publish(i, []fsm.Result{granted("busy", i)})
	}
	done, cancel := context.WithCancel(context.Background())
	cancel() // Next scans once, then returns at once
	coldScan := func() time.Duration {
		w, err := h.Watch("quiet", false, h.first)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		w.Next(done, time.Hour)
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
		for range 50 {
			select {
			case <-stop:
				return
			default:
			}
			coldScan()
		}
	}()
	var worst time.Duration
	index := uint64(kept)
	for range 200 {
		index++
		start := time.Now()
		h.Publish(index, []fsm.Result{granted("busy", index)})
		worst = max(worst, time.Since(start))
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	<-scanning
	if worst > scan/4 {
		t.Fatalf("a Publish waited %v for watchers that scan (a full scan takes %v): the apply path blocks on watchers", worst, scan)
	}
	t.Logf("worst Publish %v; a full scan %v", worst, scan)
}
