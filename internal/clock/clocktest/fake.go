// Package clocktest provides a clock that moves only when a test says so.
package clocktest

import (
	"sync"
	"time"

	"github.com/fencehq/fence/internal/clock"
)

// Fake is a clock.Clock that moves only on Advance and Suspend. Safe for
// concurrent use.
//
// It keeps two readings, like a Linux host: boottime (what Now returns, and
// what timers and tickers are due on) and monotonic (Monotonic; Go's
// time.Now reading). Advance moves both; Suspend moves only boottime, the
// way CLOCK_MONOTONIC stands still while a host sleeps, and fires what fell
// due only at the resume.
type Fake struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when a timer or ticker is armed
	now     time.Time  // boottime
	mono    time.Duration
	tickers []*ticker
	timers  []*timer
}

// New returns a fake clock set to a fixed instant.
func New() *Fake {
	f := &Fake{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Now returns the fake boottime.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Monotonic returns how far the monotonic clock has moved since New: Advance
// moves it, Suspend does not.
func (f *Fake) Monotonic() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// NewTicker returns a ticker that fires as Advance passes its period.
func (f *Fake) NewTicker(d time.Duration) clock.Ticker {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &ticker{f: f, period: d, next: f.now.Add(d), c: make(chan time.Time, 1)}
	f.tickers = append(f.tickers, t)
	f.cond.Broadcast()
	return t
}

// NewTimer returns a timer that sends on C when the clock reaches now+d.
func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	t := &timer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc returns a timer that calls fn when the clock reaches now+d. fn
// runs on the goroutine that moved the clock, before Advance or Suspend
// returns, after the clock's lock is released (fn may read the clock).
func (f *Fake) AfterFunc(d time.Duration, fn func()) clock.Timer {
	t := &timer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Armed returns how many timers are active and tickers not stopped.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armedLocked()
}

func (f *Fake) armedLocked() int {
	n := 0
	for _, t := range f.timers {
		if t.active {
			n++
		}
	}
	for _, t := range f.tickers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// BlockUntilArmed waits until at least n timers and tickers are armed: the
// goroutines under test are waiting on this clock. It never times out; the
// test's own deadline ends a test that hangs.
func (f *Fake) BlockUntilArmed(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.armedLocked() < n {
		f.cond.Wait()
	}
}

// Advance moves both clocks forward by d in steps, firing each timer and
// ticker as its time passes (a ticker whose reader lags drops ticks, like
// time.Ticker).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	f.mono += d
	for {
		fn, ok := f.fireNextLocked(end)
		if !ok {
			break
		}
		if fn != nil {
			f.mu.Unlock()
			fn()
			f.mu.Lock()
		}
	}
	f.now = end
	f.mu.Unlock()
}

// Suspend models a host suspend of d: boottime moves forward by d, the
// monotonic clock does not, and whatever fell due during the suspend fires
// on resume, with Now already at the resume instant (each ticker once).
func (f *Fake) Suspend(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	var fns []func()
	for _, t := range f.timers {
		if t.active && !t.due.After(f.now) {
			t.active = false
			if fn := t.fire(f.now); fn != nil {
				fns = append(fns, fn)
			}
		}
	}
	for _, t := range f.tickers {
		if !t.stopped && !t.next.After(f.now) {
			for !t.next.After(f.now) {
				t.next = t.next.Add(t.period)
			}
			select {
			case t.c <- f.now:
			default:
			}
		}
	}
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// fireNextLocked fires the earliest timer or ticker due by end, moving now
// to its time. It returns an AfterFunc callback to run unlocked.
func (f *Fake) fireNextLocked(end time.Time) (func(), bool) {
	var (
		tk *ticker
		tm *timer
		at time.Time
	)
	for _, t := range f.tickers {
		if !t.stopped && !t.next.After(end) && (tk == nil || t.next.Before(at)) {
			tk, at = t, t.next
		}
	}
	for _, t := range f.timers {
		if t.active && !t.due.After(end) && (tk == nil && tm == nil || t.due.Before(at)) {
			tk, tm, at = nil, t, t.due
		}
	}
	switch {
	case tm != nil:
		f.now = at
		tm.active = false
		return tm.fire(at), true
	case tk != nil:
		f.now = at
		tk.next = tk.next.Add(tk.period)
		select {
		case tk.c <- at:
		default:
		}
		return nil, true
	}
	return nil, false
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

type timer struct {
	f      *Fake
	fn     func()
	c      chan time.Time
	due    time.Time // guarded by f.mu
	active bool      // guarded by f.mu
	listed bool      // guarded by f.mu; in f.timers
}

// fire sends on C, or returns the callback to run. f.mu is held.
func (t *timer) fire(at time.Time) func() {
	if t.fn != nil {
		return t.fn
	}
	select {
	case t.c <- at:
	default:
	}
	return nil
}

func (t *timer) C() <-chan time.Time { return t.c }

func (t *timer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.stopLocked()
}

func (t *timer) stopLocked() bool {
	was := t.active
	t.active = false
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	return was
}

func (t *timer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.stopLocked()
	t.due, t.active = t.f.now.Add(d), true
	if !t.listed {
		t.listed = true
		t.f.timers = append(t.f.timers, t)
	}
	t.f.cond.Broadcast()
	return was
}
