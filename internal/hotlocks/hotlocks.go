// Package hotlocks keeps the hottest lock names in bounded memory: a
// space-saving top-K sketch (Metwally, Agrawal, El Abbadi, 2005) whose
// counts decay exponentially with the log's clock, so "hot" means busy
// lately, not busy once.
//
// # Basics
//
// A Sketch tracks at most K names. Each event of a tracked name adds to its
// counts; an event of an untracked name, when K are tracked, replaces the
// name with the lowest score, and the newcomer starts from that score
// (recorded as its Error: its score overstates it by at most that much).
// A name that is truly among the hottest is never the lowest for long, so
// it stays; memory is K entries whatever the number of names.
//
// The score is grants plus waits started. Every count decays with time
// constant Tau on the log's clock (fsm.State.Clock): an event t ago counts
// exp(−t/Tau), so with the default 5 minutes a count is about the events
// of the last 5 minutes, and count/Tau a rate.
//
// # Caveats
//
// Not safe for concurrent use: the node's apply path owns it (reads take
// the same lock). The counts are this member's since it started applying:
// a member that restored a snapshot has not seen the events before it.
package hotlocks

import (
	"container/heap"
	"math"
	"slices"
	"time"
)

// Defaults of New.
const (
	DefaultK   = 4096
	DefaultTau = 5 * time.Minute
)

// renormalizeAt is the weight above which the sketch rescales its counts
// (forward decay stores count × exp((t−landmark)/Tau); rescaling moves the
// landmark to now so that the floats never overflow).
const renormalizeAt = 1e100

// Sketch is the top-K structure. The zero value is not usable: call New.
type Sketch struct {
	k        int
	tau      float64 // seconds
	landmark time.Duration
	at       time.Duration // the clock of the weight below
	weight   float64       // exp((at−landmark)/tau)
	byName   map[string]*entry
	heap     minHeap
}

// entry is one tracked name; counts are forward-decayed (see renormalizeAt).
type entry struct {
	name                                string
	score, err                          float64
	grants, waits, waitSecs, expiration float64
	index                               int // in the heap
}

// New returns a sketch of at most k names (k ≤ 0: DefaultK) whose counts
// decay with time constant tau (≤ 0: DefaultTau).
func New(k int, tau time.Duration) *Sketch {
	if k <= 0 {
		k = DefaultK
	}
	if tau <= 0 {
		tau = DefaultTau
	}
	return &Sketch{k: k, tau: tau.Seconds(), weight: 1, byName: make(map[string]*entry, k), heap: make(minHeap, 0, k)}
}

// K returns how many names the sketch tracks at most.
func (s *Sketch) K() int { return s.k }

// Tau returns the decay time constant.
func (s *Sketch) Tau() time.Duration { return time.Duration(s.tau * float64(time.Second)) }

// Len returns how many names it tracks now.
func (s *Sketch) Len() int { return len(s.heap) }

// NameBytes returns the bytes of the names it tracks (its memory is K
// entries plus these).
func (s *Sketch) NameBytes() int {
	n := 0
	for _, e := range s.heap {
		n += len(e.name)
	}
	return n
}

// advance sets the weight of events at log clock now.
func (s *Sketch) advance(now time.Duration) float64 {
	if now == s.at {
		return s.weight
	}
	s.at = now
	s.weight = math.Exp((now - s.landmark).Seconds() / s.tau)
	if s.weight > renormalizeAt {
		for _, e := range s.heap {
			for _, f := range []*float64{&e.score, &e.err, &e.grants, &e.waits, &e.waitSecs, &e.expiration} {
				*f /= s.weight
			}
		}
		s.landmark, s.weight = now, 1
	}
	return s.weight
}

// entry returns name's entry, tracking it if it is not (by replacing the
// lowest when full), and the weight of an event at now. scored says
// whether the event adds to the score: an event that does not never
// evicts another name (it is dropped if name is not tracked).
func (s *Sketch) entry(name string, now time.Duration, scored bool) (*entry, float64) {
	w := s.advance(now)
	if e := s.byName[name]; e != nil {
		return e, w
	}
	if !scored {
		return nil, w
	}
	if len(s.heap) < s.k {
		e := &entry{name: name}
		s.byName[name] = e
		heap.Push(&s.heap, e)
		return e, w
	}
	e := s.heap[0] // the lowest: the newcomer inherits its score as error
	delete(s.byName, e.name)
	*e = entry{name: name, score: e.score, err: e.score, index: 0}
	s.byName[name] = e
	return e, w
}

// bump adds w to e's score and restores the heap.
func (s *Sketch) bump(e *entry, w float64) {
	e.score += w
	heap.Fix(&s.heap, e.index)
}

// Granted counts a grant of name at log clock now.
func (s *Sketch) Granted(name string, now time.Duration) {
	e, w := s.entry(name, now, true)
	e.grants += w
	s.bump(e, w)
}

// WaitStarted counts an acquire of name that joined its queue at now.
func (s *Sketch) WaitStarted(name string, now time.Duration) {
	e, w := s.entry(name, now, true)
	e.waits += w
	s.bump(e, w)
}

// Waited adds a finished wait of d for name at now (not scored: the
// wait's start was).
func (s *Sketch) Waited(name string, d, now time.Duration) {
	if e, w := s.entry(name, now, false); e != nil {
		e.waitSecs += w * d.Seconds()
	}
}

// Expired counts a grant of name ended by its lease's expiry at now (not
// scored: the grant was).
func (s *Sketch) Expired(name string, now time.Duration) {
	if e, w := s.entry(name, now, false); e != nil {
		e.expiration += w
	}
}

// Lock is one name's decayed counts as Top reports them: each is about
// the count of the last Tau (see the package doc).
type Lock struct {
	Name string
	// Score is Grants + Waits, plus up to Error inherited from the name
	// it replaced.
	Score, Error float64
	// Grants and Waits count grants and acquires that joined the queue;
	// WaitSeconds the time waited by those granted after a wait;
	// Expirations the grants ended by their lease's expiry.
	Grants, Waits, WaitSeconds, Expirations float64
}

// Top returns up to n of the tracked names that keep admits (nil: all),
// hottest first (ties by name), with counts as of log clock now. It holds
// n of them at a time, whatever K: the caller holds the node's state lock.
func (s *Sketch) Top(n int, now time.Duration, keep func(name string) bool) []Lock {
	if n <= 0 {
		return nil
	}
	w := math.Exp((now - s.landmark).Seconds() / s.tau)
	best := make(coolest, 0, min(n, len(s.heap))) // the n hottest so far, the least hot at the root
	for _, e := range s.heap {
		if keep != nil && !keep(e.name) {
			continue
		}
		l := Lock{Name: e.name, Score: e.score / w, Error: e.err / w, Grants: e.grants / w,
			Waits: e.waits / w, WaitSeconds: e.waitSecs / w, Expirations: e.expiration / w}
		switch {
		case len(best) < n:
			heap.Push(&best, l)
		case hotter(l, best[0]):
			best[0] = l
			heap.Fix(&best, 0)
		}
	}
	slices.SortFunc(best, func(a, b Lock) int {
		if hotter(a, b) {
			return -1
		}
		return 1
	})
	return best
}

// hotter orders Top: by score, highest first, then by name.
func hotter(a, b Lock) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Name < b.Name
}

// coolest is a heap of Locks, the least hot at the root.
type coolest []Lock

func (h coolest) Len() int           { return len(h) }
func (h coolest) Less(i, j int) bool { return hotter(h[j], h[i]) }
func (h coolest) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *coolest) Push(x any)        { *h = append(*h, x.(Lock)) }
func (h *coolest) Pop() any {
	old := *h
	l := old[len(old)-1]
	*h = old[:len(old)-1]
	return l
}

// Reset forgets every name (a member that restored a snapshot starts over).
func (s *Sketch) Reset() {
	clear(s.byName)
	s.heap = s.heap[:0]
}

// minHeap orders entries by score, lowest first.
type minHeap []*entry

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].score < h[j].score }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *minHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *minHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
