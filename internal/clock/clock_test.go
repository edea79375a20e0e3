package clock

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestRealNowMovesWithBoottime: Real.Now differences follow CLOCK_BOOTTIME
// (a test cannot suspend the host, so it brackets each Now between boottime
// readings: n1−n0 must lie within [0, b2−b0]).
func TestRealNowMovesWithBoottime(t *testing.T) {
	b0 := bootNow()
	n0 := Real{}.Now()
	b1 := bootNow()
	n1 := Real{}.Now()
	b2 := bootNow()
	d := n1.Sub(n0)
	if d < 0 || d > b2-b0 {
		t.Fatalf("Now moved %v while boottime moved %v..%v", d, b1-b0, b2-b0)
	}
}

func TestRealTimerStopAndReset(t *testing.T) {
	tm := Real{}.NewTimer(time.Hour)
	if !tm.Reset(0) {
		t.Fatal("Reset of an active timer reported inactive")
	}
	<-tm.C() // due at once; no bound on how soon
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported active")
	}
	done := make(chan struct{})
	Real{}.AfterFunc(0, func() { close(done) })
	<-done
}

// TestRealTimerFiresAfterModeledSuspend: a Go timer runs on CLOCK_MONOTONIC,
// so one set for the deadline would fire a whole suspend late. Here the
// boottime reading jumps 10 minutes (a suspend) past a timer due in 10
// minutes; the timer must notice at its next slice (within MaxTimerSlice of
// real time) rather than wait 10 more minutes. No time bound is asserted:
// without the re-check the test hangs until its own deadline.
func TestRealTimerFiresAfterModeledSuspend(t *testing.T) {
	var slept atomic.Int64
	now := func() time.Time { return Real{}.Now().Add(time.Duration(slept.Load())) }
	fired := make(chan struct{})
	tm := newSlicedTimer(now, 10*time.Minute, func() { close(fired) })
	ch := newSlicedTimer(now, 10*time.Minute, nil)
	slept.Store(int64(10 * time.Minute))
	<-fired
	<-ch.C()
	if tm.Stop() || ch.Stop() {
		t.Fatal("a fired timer reports itself active")
	}
}
