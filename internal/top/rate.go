package top

import "time"

// Rate counts grants over a sliding window and says how many per second.
// It is fed either each grant (Grants, from a Watch) or the highest token
// each read of the locks saw (Token, when polling: tokens count every grant
// of every lock, so the highest one seen grows by the grants in between; a
// grant whose lock is free again by the next read still counts once a
// later grant is seen). Not safe for concurrent use.
type Rate struct {
	window  time.Duration
	start   time.Time // when counting began
	samples []sample  // grants by time, oldest first, none older than window
	top     uint64    // the highest token seen (Token)
	seen    bool      // Token was called
}

type sample struct {
	at     time.Time
	grants uint64
}

// NewRate returns a Rate over window that begins counting at start.
func NewRate(start time.Time, window time.Duration) *Rate {
	return &Rate{window: window, start: start}
}

// Grants records n grants at at.
func (r *Rate) Grants(at time.Time, n uint64) {
	if n > 0 {
		r.samples = append(r.samples, sample{at, n})
	}
	r.forget(at)
}

// Token records that a read at at saw token as the highest: the grants
// since the highest token seen before (none at the first read, which
// begins the count).
func (r *Rate) Token(at time.Time, token uint64) {
	if !r.seen {
		r.top, r.start, r.seen = token, at, true
		return
	}
	if token > r.top {
		r.Grants(at, token-r.top)
		r.top = token
	}
}

// forget drops the samples that fell out of the window by now.
func (r *Rate) forget(now time.Time) {
	i := 0
	for i < len(r.samples) && now.Sub(r.samples[i].at) >= r.window {
		i++
	}
	r.samples = r.samples[i:]
}

// PerSecond is the grants per second over the window (or since counting
// began, if that is shorter), at now; -1 (unknown) until a second has
// passed since counting began.
func (r *Rate) PerSecond(now time.Time) float64 {
	span := min(now.Sub(r.start), r.window)
	if span < time.Second {
		return -1
	}
	r.forget(now)
	var n uint64
	for _, s := range r.samples {
		n += s.grants
	}
	return float64(n) / span.Seconds()
}
