package clock

import (
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
