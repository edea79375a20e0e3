package hold

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestMargin: TTL/10 by default, an explicit margin kept, both raised to
// TTL × 1000 ppm + 10ms; a negative margin or one that leaves no time is
// refused. Expected values are written out.
func TestMargin(t *testing.T) {
	for _, c := range []struct {
		ttl, m, want time.Duration
		bad          bool
	}{
		{ttl: 30 * time.Second, want: 3 * time.Second},
		{ttl: 10 * time.Second, m: 2 * time.Second, want: 2 * time.Second},
		{ttl: time.Hour, m: 100 * time.Millisecond, want: 3610 * time.Millisecond},
		{ttl: 50 * time.Millisecond, want: 10*time.Millisecond + 50*time.Microsecond},
		{ttl: 10 * time.Millisecond, bad: true}, // the floor alone is the whole TTL
		{ttl: time.Second, m: time.Second, bad: true},
		{ttl: time.Second, m: -time.Millisecond, bad: true},
	} {
		got, err := Margin(c.ttl, c.m)
		if c.bad != (err != nil) || !c.bad && got != c.want {
			t.Errorf("Margin(%v, %v) = %v, %v; want %v (refused: %v)", c.ttl, c.m, got, err, c.want, c.bad)
		}
	}
}

type fakeLease struct {
	done chan struct{}
	err  error
}

func (l *fakeLease) Done() <-chan struct{} { return l.done }
func (l *fakeLease) Err() error            { return l.err }

// TestContext: Err sees the lease's end synchronously (before Done closes),
// and the cause is the lease's error; a lease already over gives a context
// done from birth.
func TestContext(t *testing.T) {
	errGone := errors.New("gone")
	l := &fakeLease{done: make(chan struct{})}
	ctx := Context(context.Background(), l)
	if ctx.Err() != nil {
		t.Fatal("live lease, done context")
	}
	l.err = errGone // Done not closed yet: a paused process's first look
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), errGone) {
		t.Fatalf("Err %v, Cause %v; want Canceled caused by the lease's error", ctx.Err(), context.Cause(ctx))
	}
	close(l.done)
	if ctx := Context(context.Background(), l); ctx.Err() == nil || !errors.Is(context.Cause(ctx), errGone) {
		t.Fatalf("context of an ended lease: Err %v, Cause %v", ctx.Err(), context.Cause(ctx))
	}
}
