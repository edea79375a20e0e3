package clocktest

import (
	"testing"
	"time"
)

func TestSuspendMovesBoottimeOnlyAndFiresOnResume(t *testing.T) {
	f := New()
	start := f.Now()
	fired := 0
	var firedAt time.Time
	f.AfterFunc(10*time.Second, func() { fired++; firedAt = f.Now() })
	ch := f.NewTimer(5 * time.Second)
	late := f.NewTimer(time.Hour)

	f.Suspend(30 * time.Second)
	if got := f.Now().Sub(start); got != 30*time.Second {
		t.Fatalf("boottime moved %v, want 30s", got)
	}
	if got := f.Monotonic(); got != 0 {
		t.Fatalf("monotonic moved %v during a suspend, want 0", got)
	}
	if fired != 1 || !firedAt.Equal(start.Add(30*time.Second)) {
		t.Fatalf("AfterFunc fired %d times at %v, want once at the resume", fired, firedAt)
	}
	select {
	case at := <-ch.C():
		if !at.Equal(start.Add(30 * time.Second)) {
			t.Fatalf("timer fired at %v, want the resume", at)
		}
	default:
		t.Fatal("timer due during the suspend did not fire on resume")
	}
	select {
	case <-late.C():
		t.Fatal("a timer not yet due fired")
	default:
	}
	if late.Stop() != true || ch.Stop() != false {
		t.Fatal("Stop reports the wrong activity")
	}
}

func TestAdvanceFiresInOrderAndReset(t *testing.T) {
	f := New()
	start := f.Now()
	var order []time.Duration
	var a, b interface{ Reset(time.Duration) bool }
	a = f.AfterFunc(2*time.Second, func() { order = append(order, f.Now().Sub(start)) })
	b = f.AfterFunc(time.Second, func() { order = append(order, f.Now().Sub(start)) })
	b.Reset(3 * time.Second)
	f.Advance(5 * time.Second)
	if len(order) != 2 || order[0] != 2*time.Second || order[1] != 3*time.Second {
		t.Fatalf("fired at %v, want [2s 3s]", order)
	}
	if f.Monotonic() != 5*time.Second {
		t.Fatalf("monotonic %v after Advance(5s)", f.Monotonic())
	}
	_ = a
	if f.Armed() != 0 {
		t.Fatalf("%d still armed", f.Armed())
	}
}
