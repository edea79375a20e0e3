// Package clocktest provides a clock that moves only when a test says so.
package clocktest

import (
	"sync"
	"time"

	"github.com/fencehq/fence/internal/clock"
)

// Fake is a clock.Clock that moves only on Advance. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*ticker
}

// New returns a fake clock set to a fixed instant.
func New() *Fake { return &Fake{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTicker returns a ticker that fires as Advance passes its period.
func (f *Fake) NewTicker(d time.Duration) clock.Ticker {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &ticker{f: f, period: d, next: f.now.Add(d), c: make(chan time.Time, 1)}
	f.tickers = append(f.tickers, t)
	return t
}

// Advance moves the clock forward by d in steps, firing each ticker whose
// period passes (a ticker whose reader lags drops ticks, like time.Ticker).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		var next *ticker
		for _, t := range f.tickers {
			if !t.stopped && !t.next.After(end) && (next == nil || t.next.Before(next.next)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		f.now = next.next
		next.next = next.next.Add(next.period)
		select {
		case next.c <- f.now:
		default:
		}
	}
	f.now = end
}

type ticker struct {
	f       *Fake
	period  time.Duration
	next    time.Time
	c       chan time.Time
	stopped bool
}

func (t *ticker) C() <-chan time.Time { return t.c }

func (t *ticker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.stopped = true
}
