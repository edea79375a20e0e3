package client

import (
	"slices"
	"testing"
)

// TestCallNumbers: calls are numbered 1, 2, 3 … per session; a request of
// call seq acknowledges with ack, the lowest number whose answer has not
// arrived, and open, the other unanswered numbers below seq (literal values:
// the server forgets every other answer below seq and refuses those calls
// if they come again).
func TestCallNumbers(t *testing.T) {
	var n calls
	check := func(seq, wantAck uint64, wantOpen ...uint64) {
		t.Helper()
		ack, open := n.acks(seq)
		if ack != wantAck || !slices.Equal(open, wantOpen) {
			t.Fatalf("acks for call %d: ack %d open %v, want ack %d open %v", seq, ack, open, wantAck, wantOpen)
		}
	}
	for want := uint64(1); want <= 5; want++ {
		if got := n.begin(); got != want {
			t.Fatalf("call number %d, want %d", got, want)
		}
	}
	check(5, 1, 2, 3, 4) // all open
	n.answered(2)
	n.answered(4)
	check(5, 1, 3) // 2 and 4 answered: not listed
	check(3, 1)    // only calls below 3 count for call 3
	n.answered(1)
	check(5, 3)
	n.answered(3)
	check(5, 5) // only call 5 itself is open
	n.answered(5)
	n.answered(5) // twice: no effect
	if got := n.begin(); got != 6 {
		t.Fatalf("next call %d, want 6", got)
	}
	check(6, 6)
}
