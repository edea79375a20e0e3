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
// scan — any caller can open such watches, one after another. Checked by
// what one hold of the lock looks at (at most scanChunk batches), not by
// the clock; and the watcher still finds the one match at the end.
func TestRedTeamWatchScanDoesNotStallPublish(t *testing.T) {
	const kept = 10 * scanChunk
	h := New(2*kept, 0)
	for i := uint64(1); i <= kept; i++ {
		name := "busy"
		if i == kept {
			name = "quiet" // the one batch the watcher finds, after looking at every other
		}
		h.Publish(i, []fsm.Result{granted(name, i)})
	}
	w, err := h.Watch("quiet", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, more, err := w.scan()
	if err != nil || len(b.Events) != 0 || more != nil || w.next != 1+scanChunk {
		t.Fatalf("one hold of the lock looked at batches up to %d (events %d, err %v): want exactly %d, then let go",
			w.next-1, len(b.Events), err, scanChunk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b, err := w.Next(ctx, time.Hour); err != nil || b.Index != kept {
		t.Fatalf("found index %d (%v), want %d", b.Index, err, kept)
	}
}
