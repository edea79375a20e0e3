// Package clock lets components read time and wait through an interface, so
// tests can drive time by hand (see clocktest). Production code uses Real,
// whose Now carries Go's monotonic reading: differences between two Now
// values are immune to wall-clock jumps.
package clock

import "time"

// Clock reads the time and makes tickers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time (with a monotonic reading for Real).
	Now() time.Time
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) Ticker
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
