package pglease

import "github.com/fencehq/fence/internal/clock"

// WithClock makes a Locker time its leases on c (a clocktest.Fake), for the
// tests in package pglease_test.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }
