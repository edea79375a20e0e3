package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
)

// TestSafetyMarginFollowsEachLeasesTTL: the margin comes from the TTL of the
// lock's own lease, not the Dial TTL. The fake clock does not move, so a
// fresh lease's deadline is exactly now + TTL − margin. Expected margins are
// written out: TTL/10 by default, and at least TTL × 1000 ppm + 10ms.
func TestSafetyMarginFollowsEachLeasesTTL(t *testing.T) {
	ts := startServer(t)
	cases := []struct {
		name     string
		dial     []client.Option
		lock     []client.Option
		wantLeft time.Duration // deadline − now of a fresh lease
	}{
		{"short lease on a 30s client", nil, []client.Option{client.WithTTL(2 * time.Second)}, 1800 * time.Millisecond},
		{"hour lease on a 1s client", []client.Option{client.WithTTL(time.Second)}, []client.Option{client.WithTTL(time.Hour)}, 54 * time.Minute},
		{"explicit margin kept", nil, []client.Option{client.WithTTL(10 * time.Second), client.WithSafetyMargin(2 * time.Second)}, 8 * time.Second},
		{"explicit margin below the floor raised", nil, []client.Option{client.WithTTL(time.Hour), client.WithSafetyMargin(100 * time.Millisecond)}, time.Hour - 3610*time.Millisecond},
		{"dial margin, lock TTL", []client.Option{client.WithSafetyMargin(time.Second)}, []client.Option{client.WithTTL(5 * time.Second)}, 4 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New()
			c := dial(t, ts.addr, append(tc.dial, client.WithClock(clk))...)
			l, err := c.Lock(ctxT(t, 5*time.Second), "m", tc.lock...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctxT(t, 5*time.Second))
			if left := l.Deadline().Sub(clk.Now()); left != tc.wantLeft {
				t.Fatalf("deadline %v after now, want %v (err %v)", left, tc.wantLeft, l.Err())
			}
			if err := l.Err(); err != nil {
				t.Fatalf("fresh lease: %v", err)
			}
		})
	}
}

// TestLocksWithDifferentMarginsDoNotShareALease: the pool is keyed by TTL
// and margin; the same pair shares one lease.
func TestLocksWithDifferentMarginsDoNotShareALease(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithClock(clocktest.New()))
	a, err := c.Lock(ctxT(t, 5*time.Second), "a", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Lock(ctxT(t, 5*time.Second), "b", client.WithTTL(10*time.Second), client.WithSafetyMargin(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.Lock(ctxT(t, 5*time.Second), "a2", client.WithTTL(10*time.Second), client.WithSafetyMargin(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.LeaseNumber() == b.LeaseNumber() {
		t.Fatalf("margins 1s and 3s share lease #%d", a.LeaseNumber())
	}
	if a.LeaseNumber() != a2.LeaseNumber() {
		t.Fatalf("the default margin (1s of 10s) and an explicit 1s use leases #%d and #%d", a.LeaseNumber(), a2.LeaseNumber())
	}
}

// TestMarginNotShorterThanTTL: a margin ≥ TTL is refused with ErrInvalid,
// at Dial and per lock, and nothing is created.
func TestMarginNotShorterThanTTL(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	if _, err := c.Lock(ctxT(t, 5*time.Second), "m", client.WithTTL(2*time.Second), client.WithSafetyMargin(2*time.Second)); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("Lock with margin = TTL: %v, want ErrInvalid", err)
	}
	if _, err := client.Dial(ctxT(t, 5*time.Second), []string{ts.addr}, client.WithInsecure(), client.WithTTL(time.Second), client.WithSafetyMargin(5*time.Second)); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("Dial with margin > TTL: %v, want ErrInvalid", err)
	}
}
