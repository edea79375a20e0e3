package client

import "testing"

// TestCallNumbers: calls are numbered 1, 2, 3 … per session, and ack is the
// lowest number whose answer has not arrived, or the next number if every
// answer has (literal values: the server forgets every answer below ack and
// refuses those calls if they come again).
func TestCallNumbers(t *testing.T) {
	var n calls
	if got := n.ack(); got != 1 {
		t.Fatalf("ack before any call: %d, want 1", got)
	}
	for want := uint64(1); want <= 3; want++ {
		if got := n.begin(); got != want {
			t.Fatalf("call number %d, want %d", got, want)
		}
	}
	if got := n.ack(); got != 1 {
		t.Fatalf("ack with calls 1–3 open: %d, want 1", got)
	}
	n.answered(2)
	if got := n.ack(); got != 1 {
		t.Fatalf("ack with 1 and 3 open: %d, want 1", got)
	}
	n.answered(1)
	if got := n.ack(); got != 3 {
		t.Fatalf("ack with 3 open: %d, want 3", got)
	}
	n.answered(3)
	if got := n.ack(); got != 4 {
		t.Fatalf("ack with none open after 3 calls: %d, want 4", got)
	}
	n.answered(3) // twice: no effect
	if got, ack := n.begin(), n.ack(); got != 4 || ack != 4 {
		t.Fatalf("next call %d with ack %d, want 4 and 4", got, ack)
	}
}
