package client

import "github.com/fencehq/fence/internal/clock"

// WithClock makes the client time its leases on c (a clocktest.Fake), for
// the tests in package client_test.
func WithClock(c clock.Clock) Option { return withClock(c) }
