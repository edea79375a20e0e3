package hold

import (
	"context"
	"testing"
)

// heldLease is a Releasable that counts its releases.
type heldLease struct {
	done     chan struct{}
	released int
}

func (l *heldLease) Done() <-chan struct{} { return l.done }
func (l *heldLease) Err() error            { return nil }
func (l *heldLease) Release(context.Context) error {
	l.released++
	return nil
}

// TestDoReleasesWhenFnPanics: a panic in fn must not leave the lease held
// (its Keeper renews it for as long as the process lives, and no one else
// can take the lock), when the panic is recovered further up, as net/http
// does for a handler. Do releases it and panics on with the same value.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	l := &heldLease{done: make(chan struct{})}
	var got any
	func() {
		defer func() { got = recover() }()
		Do(context.Background(), l, "test", func(context.Context) error { panic("boom") })
	}()
	if got != "boom" {
		t.Errorf("recovered %v, want Do to panic on with fn's value %q", got, "boom")
	}
	if l.released != 1 {
		t.Errorf("released %d times after fn panicked, want 1", l.released)
	}
}
