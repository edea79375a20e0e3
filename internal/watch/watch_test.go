package watch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

func granted(name string, token uint64) fsm.Result {
	return fsm.Result{Events: []fsm.Event{{Kind: fsm.Granted, Name: name, Token: token},
		{Kind: fsm.LeaseRenewed}}} // not a lock event: never reported
}

// next reads one batch, failing the test if none comes within a second.
func next(t *testing.T, w *Watcher) Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := w.Next(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tokens(b Batch) []uint64 {
	var ts []uint64
	for _, e := range b.Events {
		ts = append(ts, e.Token)
	}
	return ts
}

func TestWatchNameAndPrefix(t *testing.T) {
	h := New(0, 10)
	one, _ := h.Watch("jobs/a", false, 0)
	all, _ := h.Watch("jobs/", true, 0)
	h.Publish(11, []fsm.Result{granted("jobs/a", 1), granted("other", 2)})
	h.Publish(12, []fsm.Result{{Code: fsm.OK}}) // a tick: no events
	h.Publish(13, []fsm.Result{granted("jobs/b", 3)})
	h.Publish(14, []fsm.Result{granted("jobs/a", 4), granted("jobs/ab", 5)})
	for _, want := range []struct {
		index uint64
		toks  []uint64
	}{{11, []uint64{1}}, {14, []uint64{4}}} {
		if b := next(t, one); b.Index != want.index || len(b.Events) != 1 || b.Events[0].Token != want.toks[0] {
			t.Fatalf("jobs/a: got index %d tokens %v, want %d %v", b.Index, tokens(b), want.index, want.toks)
		}
	}
	for _, want := range []struct {
		index uint64
		n     int
	}{{11, 1}, {13, 1}, {14, 2}} {
		if b := next(t, all); b.Index != want.index || len(b.Events) != want.n {
			t.Fatalf("jobs/: got index %d tokens %v, want index %d with %d events", b.Index, tokens(b), want.index, want.n)
		}
	}
}

func TestWatchResumesFromAnIndex(t *testing.T) {
	h := New(0, 0)
	for i := uint64(1); i <= 5; i++ {
		h.Publish(i, []fsm.Result{granted("a", i)})
	}
	w, err := h.Watch("a", false, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(3); i <= 5; i++ {
		if b := next(t, w); b.Index != i {
			t.Fatalf("got index %d, want %d", b.Index, i)
		}
	}
}

func TestWatchCompacted(t *testing.T) {
	h := New(3, 100)
	if _, err := h.Watch("a", false, 100); !errors.Is(err, ErrCompacted) {
		t.Fatalf("from before the history's start: %v, want ErrCompacted", err)
	}
	slow, _ := h.Watch("a", false, 101)
	for i := uint64(101); i <= 105; i++ {
		h.Publish(i, []fsm.Result{granted("a", i)})
	}
	// 3 events kept: 103, 104, 105.
	if _, err := h.Watch("a", false, 102); !errors.Is(err, ErrCompacted) {
		t.Fatalf("from an evicted index: %v, want ErrCompacted", err)
	}
	var ce *CompactedError
	if _, err := slow.Next(context.Background(), time.Hour); !errors.As(err, &ce) || ce.From != 101 || ce.Oldest != 103 {
		t.Fatalf("a watcher left behind: %v, want compacted from 101, oldest 103", err)
	}
	w, err := h.Watch("a", false, 103)
	if err != nil {
		t.Fatal(err)
	}
	if b := next(t, w); b.Index != 103 {
		t.Fatalf("got %d, want 103", b.Index)
	}
	h.Reset(200) // a snapshot at 200 replaced the state
	if _, err := w.Next(context.Background(), time.Hour); !errors.Is(err, ErrCompacted) {
		t.Fatalf("after a reset: %v, want ErrCompacted", err)
	}
	after, err := h.Watch("a", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Publish(201, []fsm.Result{granted("a", 9)})
	if b := next(t, after); b.Index != 201 {
		t.Fatalf("got %d, want 201", b.Index)
	}
}

func TestWatchProgress(t *testing.T) {
	h := New(0, 0)
	w, _ := h.Watch("a", false, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if b, err := w.Next(ctx, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nothing applied: got %+v %v, want to wait until ctx ends", b, err)
	}
	h.Publish(1, []fsm.Result{granted("b", 1)})
	h.Publish(2, []fsm.Result{{Code: fsm.OK}})
	b, err := w.Next(context.Background(), time.Millisecond)
	if err != nil || b.Index != 2 || len(b.Events) != 0 {
		t.Fatalf("got %+v %v, want a progress mark at 2", b, err)
	}
	h.Publish(3, []fsm.Result{granted("a", 2)})
	if b := next(t, w); b.Index != 3 || len(b.Events) != 1 {
		t.Fatalf("got %+v, want the grant at 3", b)
	}
}

func TestWatchWaitsForAnIndexAhead(t *testing.T) {
	h := New(0, 5)
	w, err := h.Watch("a", false, 8)
	if err != nil {
		t.Fatal(err)
	}
	h.Publish(6, []fsm.Result{granted("a", 1)})
	h.Publish(8, []fsm.Result{granted("a", 2)})
	if b := next(t, w); b.Index != 8 {
		t.Fatalf("got %d, want 8 (6 is before the asked index)", b.Index)
	}
}

// TestWatchNeverSkips: with entries applied while the watcher reads and
// progress marks due all the time, the watcher gets every matching event
// once, in order, and never an event at or below an index it was told
// about already.
func TestWatchNeverSkips(t *testing.T) {
	const n = 20000
	h := New(n, 0)
	w, _ := h.Watch("a", false, 0)
	go func() {
		for i := uint64(1); i <= n; i++ {
			name := "b"
			if i%7 == 0 {
				name = "a"
			}
			h.Publish(i, []fsm.Result{granted(name, i)})
		}
	}()
	var told uint64
	want := uint64(7)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for want <= n {
		b, err := w.Next(ctx, time.Nanosecond)
		if err != nil {
			t.Fatalf("waiting for index %d: %v", want, err)
		}
		if b.Index <= told {
			t.Fatalf("index %d after %d", b.Index, told)
		}
		told = b.Index
		if len(b.Events) == 0 {
			if b.Index >= want {
				t.Fatalf("progress mark at %d skipped the event at %d", b.Index, want)
			}
			continue
		}
		if b.Index != want {
			t.Fatalf("event at %d, want %d", b.Index, want)
		}
		want += 7
	}
}

// TestWatchBoundsBytes: large fenced writes leave the history by size, long
// before its event count is reached, so a history of 1 MiB values stays
// within MaxBytes.
func TestWatchBoundsBytes(t *testing.T) {
	h := New(1_000_000, 0)
	value := make([]byte, 1<<20)
	for i := uint64(1); i <= 100; i++ {
		h.Publish(i, []fsm.Result{{Events: []fsm.Event{{Kind: fsm.Written, Name: "k", Token: i, Value: value}}}})
	}
	// 64 MiB hold 63 of these events (each counts 1 MiB + the key + eventOverhead).
	if _, err := h.Watch("k", false, 37); !errors.Is(err, ErrCompacted) {
		t.Fatalf("from index 37: %v, want ErrCompacted (the oldest kept is 38)", err)
	}
	w, err := h.Watch("k", false, 38)
	if err != nil {
		t.Fatal(err)
	}
	if b := next(t, w); b.Index != 38 || string(b.Events[0].Value) != string(value) {
		t.Fatalf("got index %d, want 38 with its value", b.Index)
	}
}
