package client

import (
	"time"

	"github.com/fencehq/fence/internal/clock"
)

// WithClock makes the client time its leases on c (a clocktest.Fake), for
// the tests in package client_test.
func WithClock(c clock.Clock) Option { return withClock(c) }

// WithSettleFor bounds how long the client tries to settle an unknown
// outcome before it gives up the whole session.
func WithSettleFor(d time.Duration) Option { return func(o *options) { o.settleFor = d } }
