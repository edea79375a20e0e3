// Package watch keeps the lock events (and fenced writes) a node applied,
// by raft index, for the Watch call: a bounded history that a watcher can
// start or resume from, and a wake-up for the watchers that wait for the
// next event.
//
// Every replica applies the same entries, so every member's history holds
// the same events at the same indexes: a watcher that loses its member
// resumes on another one from the index after the last it saw. A history
// starts at the index its node started (or restored a snapshot) at and
// keeps the newest MaxEvents events (and at most MaxBytes of them); a
// watcher that asks for an index before that gets ErrCompacted and must
// list the locks again.
//
// A watcher reads at its own pace from the shared history (nothing is
// copied per watcher and nothing blocks the apply path); one that falls so
// far behind that its next index leaves the history gets ErrCompacted.
package watch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// DefaultMaxEvents is how many events a History keeps unless told: about
// 10 MB with names of 32 bytes.
const DefaultMaxEvents = 100_000

// MaxBytes bounds a History's events by size as well (names, owners and the
// values of fenced writes, which may each be up to 1 MiB, plus
// eventOverhead each): the oldest batches leave first, as for MaxEvents.
const MaxBytes = 64 << 20

// eventOverhead is what MaxBytes counts for one event besides its strings.
const eventOverhead = 128

// size is what an event counts against MaxBytes.
func size(e fsm.Event) int { return eventOverhead + len(e.Name) + len(e.Owner) + len(e.Value) }

// Batch is the watched events of one applied entry (see
// fsm.EventKind.Watched), or, with no events, a progress mark: every entry
// up to Index has been looked at.
type Batch struct {
	Index  uint64
	Events []fsm.Event
}

// ErrCompacted: the events from the asked index on are not all kept here.
var ErrCompacted = errors.New("watch: events no longer kept")

// CompactedError says which index was asked and which is the oldest kept.
type CompactedError struct {
	From, Oldest uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("the events from index %d on are no longer all kept (this member keeps them from index %d): list the locks again and watch from the list's index + 1", e.From, e.Oldest)
}

// Is makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// History is one node's history of lock events. Publish and Reset run on
// the apply path; Watch and the watchers run anywhere.
type History struct {
	max  int
	last atomic.Uint64 // the last index published (applied)

	mu      sync.Mutex
	batches []Batch       // in index order; only entries with lock events
	events  int           // events in batches
	bytes   int           // their size (see size)
	sizes   []int         // the size of each batch, as batches
	first   uint64        // every entry at or after first that has lock events is in batches
	more    chan struct{} // closed (and replaced) when a batch is added or the history is reset
}

// New returns a history of at most maxEvents events (DefaultMaxEvents if
// 0) that starts after index applied.
func New(maxEvents int, applied uint64) *History {
	if maxEvents <= 0 {
		maxEvents = DefaultMaxEvents
	}
	h := &History{max: maxEvents, first: applied + 1, more: make(chan struct{})}
	h.last.Store(applied)
	return h
}

// Publish records the lock events of the entry at index (the results of
// its commands, in order). It never blocks on a watcher.
func (h *History) Publish(index uint64, results []fsm.Result) {
	var evs []fsm.Event
	n := 0
	for i := range results {
		for _, e := range results[i].Events {
			if e.Kind.Watched() {
				evs = append(evs, e)
				n += size(e)
			}
		}
	}
	if len(evs) == 0 {
		h.last.Store(index)
		return
	}
	h.mu.Lock()
	h.batches = append(h.batches, Batch{Index: index, Events: evs})
	h.sizes = append(h.sizes, n)
	h.events += len(evs)
	h.bytes += n
	for (h.events > h.max || h.bytes > MaxBytes) && len(h.batches) > 1 {
		h.events -= len(h.batches[0].Events)
		h.bytes -= h.sizes[0]
		h.first = h.batches[0].Index + 1
		h.batches[0] = Batch{}
		h.batches, h.sizes = h.batches[1:], h.sizes[1:]
	}
	h.last.Store(index)
	h.wake()
	h.mu.Unlock()
}

// Reset drops the history: a snapshot at index replaced the state, so the
// entries before it were not applied here. Watchers that have not seen
// every event up to index end with ErrCompacted.
func (h *History) Reset(index uint64) {
	h.mu.Lock()
	h.batches, h.sizes, h.events, h.bytes, h.first = nil, nil, 0, 0, index+1
	h.last.Store(index)
	h.wake()
	h.mu.Unlock()
}

func (h *History) wake() {
	close(h.more)
	h.more = make(chan struct{})
}

// Last returns the index of the last entry published.
func (h *History) Last() uint64 { return h.last.Load() }

// Watch starts a watcher of the lock name (or, with prefix, of every lock
// whose name starts with it) from index from: from 0 means from the next
// entry applied. An index ahead of what this node applied is waited for.
func (h *History) Watch(name string, prefix bool, from uint64) (*Watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if from == 0 {
		from = h.last.Load() + 1
	}
	if from < h.first {
		return nil, &CompactedError{From: from, Oldest: h.first}
	}
	return &Watcher{h: h, name: name, prefix: prefix, from: from, next: from, told: from - 1}, nil
}

// From returns the first index the watcher reports events of.
func (w *Watcher) From() uint64 { return w.from }

// Watcher reads one watch's events from a History. It is not safe for
// concurrent use.
type Watcher struct {
	h      *History
	name   string
	prefix bool
	from   uint64 // the first index asked for
	next   uint64 // the first index not yet looked at
	told   uint64 // the last index reported (by a batch or a progress mark)
}

// Next returns the next batch of events that match, waiting for one until
// ctx ends. After idle without one, it returns a progress mark (a Batch
// with no events) if entries were applied since the last report, so a
// watcher on a quiet lock keeps an index to resume from.
func (w *Watcher) Next(ctx context.Context, idle time.Duration) (Batch, error) {
	timer := time.NewTimer(idle)
	defer timer.Stop()
	idled := false
	for {
		// Every batch at or below last is in the history before last is
		// stored, so the scan below sees them all: a progress mark at last
		// never skips an event.
		last := w.h.Last()
		b, more, err := w.scan()
		for err == nil && len(b.Events) == 0 && more == nil { // the rest, a chunk at a time
			runtime.Gosched() // a Publish woken by the unlock takes the lock first
			if err = ctx.Err(); err == nil {
				b, more, err = w.scan()
			}
		}
		if err != nil || len(b.Events) > 0 {
			return b, err
		}
		if idled {
			if last > w.told {
				w.next, w.told = max(w.next, last+1), last
				return Batch{Index: last}, nil
			}
			idled = false
			timer.Reset(idle)
		}
		select {
		case <-more:
		case <-timer.C:
			idled = true
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
}

// scanChunk is how many batches scan looks at while it holds the
// history's lock: Publish, on the apply path, never waits for a whole scan.
const scanChunk = 512

// scan looks at the kept batches from w.next on and returns the first that
// matches (its events that match), or nothing and the channel to wait on,
// or nothing and no channel: it looked at scanChunk batches, call it again.
func (w *Watcher) scan() (Batch, <-chan struct{}, error) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.next < h.first {
		return Batch{}, nil, &CompactedError{From: w.next, Oldest: h.first}
	}
	i := sort.Search(len(h.batches), func(i int) bool { return h.batches[i].Index >= w.next })
	for end := i + scanChunk; i < len(h.batches); i++ {
		if i == end {
			return Batch{}, nil, nil
		}
		b := h.batches[i]
		w.next = b.Index + 1
		var evs []fsm.Event
		for _, e := range b.Events {
			if w.matches(e.Name) {
				evs = append(evs, e)
			}
		}
		if len(evs) > 0 {
			w.told = b.Index
			return Batch{Index: b.Index, Events: evs}, nil, nil
		}
	}
	return Batch{}, h.more, nil
}

func (w *Watcher) matches(name string) bool {
	if w.prefix {
		return strings.HasPrefix(name, w.name)
	}
	return name == w.name
}
