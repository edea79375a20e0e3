// Package clock lets components read time and wait through an interface, so
// tests can drive time by hand (see clocktest).
//
// Production code uses Real. Its Now counts on CLOCK_BOOTTIME on Linux: the
// clock that keeps counting while the host is suspended. Go's own monotonic
// clock (time.Now's reading, and every Go timer) is CLOCK_MONOTONIC, which
// stands still during a suspend, so a lease deadline measured on it would
// still lie in the future after the host slept through it. Differences of
// two Real.Now values are boottime differences, immune to wall-clock jumps.
// Real's timers fire at their boottime deadline, re-checking at least every
// MaxTimerSlice, so one due during a suspend fires at most that long after
// the resume. (Other systems fall back to Go's monotonic clock.)
//
// Never mix a Real.Now value with a time.Now value (time.Until, time.Since,
// Time.Sub against time.Now): their monotonic readings count on different
// clocks. Use Since and Until with the same Clock.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock reads the time, makes timers and tickers. Implementations are safe
// for concurrent use.
type Clock interface {
	// Now returns the current time. Only differences between two Now values
	// of the same Clock are meaningful (for Real: on CLOCK_BOOTTIME).
	Now() time.Time
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) Ticker
	// NewTimer returns a timer that sends the time on C once d has passed on
	// this clock.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed on this clock.
	// The Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Timer fires once, like time.Timer: Stop and Reset report whether the timer
// was active, and after either no stale value is received from C.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Since returns the time passed on c since t (a value of c.Now()).
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the time left on c until t (a value derived from c.Now()).
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }

// Sleep waits d on c, or until ctx ends (then it returns ctx.Err()).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// MaxTimerSlice is the longest Real's timers wait on a Go timer before they
// look at the boottime clock again: the most a timer due during a host
// suspend fires late after the resume.
const MaxTimerSlice = time.Second

// Real is the system clock (CLOCK_BOOTTIME on Linux).
type Real struct{}

// base pairs one time.Now (for its wall and monotonic readings) with the
// boottime reading taken at the same moment; Now adds boottime elapsed since.
var base = sync.OnceValues(func() (time.Time, time.Duration) { return time.Now(), bootNow() })

// Now returns the start instant plus the boottime that passed since: its
// monotonic reading moves with CLOCK_BOOTTIME, its wall reading is
// approximate (for display only).
func (Real) Now() time.Time {
	t0, b0 := base()
	return t0.Add(bootNow() - b0)
}

// NewTicker returns a time.Ticker (period-based: a suspend only delays a
// tick, it never makes one early).
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// NewTimer returns a timer due d from now on the boottime clock.
func (r Real) NewTimer(d time.Duration) Timer { return newSlicedTimer(r.Now, d, nil) }

// AfterFunc calls f once d has passed on the boottime clock.
func (r Real) AfterFunc(d time.Duration, f func()) Timer { return newSlicedTimer(r.Now, d, f) }

// newSlicedTimer returns a timer due d from now() that calls f, or sends on
// its channel if f is nil.
func newSlicedTimer(now func() time.Time, d time.Duration, f func()) *realTimer {
	t := &realTimer{now: now, f: f}
	if f == nil {
		t.c = make(chan time.Time, 1)
	}
	t.Reset(d)
	return t
}

// realTimer waits on Go timers of at most MaxTimerSlice and compares Real.Now
// with its due time after each, so a host suspend delays it by at most one
// slice after the resume.
type realTimer struct {
	now func() time.Time // Real.Now
	f   func()
	c   chan time.Time

	mu     sync.Mutex
	due    time.Time   // guarded by mu
	gen    uint64      // guarded by mu; bumped by Stop and Reset so stale slices do nothing
	active bool        // guarded by mu
	t      *time.Timer // guarded by mu; the current slice
}

func (t *realTimer) C() <-chan time.Time { return t.c }

func (t *realTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopLocked()
}

func (t *realTimer) stopLocked() bool {
	was := t.active
	t.active = false
	t.gen++
	if t.t != nil {
		t.t.Stop()
	}
	if t.c != nil {
		select { // like time.Timer since Go 1.23: no stale value after Stop
		case <-t.c:
		default:
		}
	}
	return was
}

func (t *realTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.stopLocked()
	t.due = t.now().Add(d)
	t.active = true
	t.armLocked(d)
	return was
}

func (t *realTimer) armLocked(left time.Duration) {
	gen := t.gen
	t.t = time.AfterFunc(max(0, min(left, MaxTimerSlice)), func() { t.slice(gen) })
}

func (t *realTimer) slice(gen uint64) {
	t.mu.Lock()
	if gen != t.gen || !t.active {
		t.mu.Unlock()
		return
	}
	now := t.now()
	if left := t.due.Sub(now); left > 0 {
		t.armLocked(left)
		t.mu.Unlock()
		return
	}
	t.active = false
	t.mu.Unlock()
	if t.f != nil {
		t.f() // already on the Go timer's own goroutine
		return
	}
	select {
	case t.c <- now:
	default:
	}
}
