package top

import (
	"testing"
	"time"
)

func TestRateFromGrants(t *testing.T) {
	r := NewRate(t0, 10*time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if got := r.PerSecond(at(900 * time.Millisecond)); got != -1 {
		t.Errorf("before a second: %v, want -1 (unknown)", got)
	}
	for i := range 4 {
		r.Grants(at(time.Duration(i)*500*time.Millisecond), 1)
	}
	if got := r.PerSecond(at(2 * time.Second)); got != 2 { // 4 grants in 2 s
		t.Errorf("after 2s: %v grants/s, want 2", got)
	}
	r.Grants(at(12*time.Second), 3)
	// The window is the last 10 s: the grants at 1.5 s and before fell out.
	if got := r.PerSecond(at(12 * time.Second)); got != 0.3 {
		t.Errorf("after 12s: %v grants/s, want 0.3", got)
	}
	if got := r.PerSecond(at(30 * time.Second)); got != 0 {
		t.Errorf("after 30s: %v grants/s, want 0", got)
	}
}

func TestRateFromTokens(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r := NewRate(t0, 10*time.Second)
	r.Token(at(time.Second), 100) // the first read begins the count
	if got := r.PerSecond(at(1500 * time.Millisecond)); got != -1 {
		t.Errorf("half a second after the first read: %v, want -1", got)
	}
	r.Token(at(2*time.Second), 104)
	r.Token(at(3*time.Second), 90) // the lock with the highest token went free
	r.Token(at(5*time.Second), 108)
	if got := r.PerSecond(at(5 * time.Second)); got != 2 { // 8 grants in 4 s
		t.Errorf("%v grants/s, want 2", got)
	}
}
