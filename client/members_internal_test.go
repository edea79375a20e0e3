package client

import (
	"errors"
	"testing"
)

// TestMemberRotation: calls go to member cur modulo the member count, and a
// failure moves them to the next member, wrapping after the last, unless
// another call moved them first.
func TestMemberRotation(t *testing.T) {
	c := &Client{}
	ms := []*member{{addr: "a"}, {addr: "b"}, {addr: "c"}}
	c.ms.Store(&ms)
	for idx, want := range map[int32]string{0: "a", 2: "c", 4: "b", 6: "a"} {
		if got := c.memberAt(idx).addr; got != want {
			t.Errorf("memberAt(%d) = %s, want %s", idx, got, want)
		}
	}
	down := errors.New("unavailable")
	c.cur.Store(1)
	c.moveOn(1, down)
	if got := c.cur.Load(); got != 2 {
		t.Fatalf("after member 1 failed: cur %d, want 2", got)
	}
	c.moveOn(2, down)
	if got := c.cur.Load(); got != 0 {
		t.Fatalf("after the last member failed: cur %d, want 0 (wrap)", got)
	}
	c.moveOn(2, down) // a late failure of a member already left
	if got := c.cur.Load(); got != 0 {
		t.Fatalf("a stale failure moved the calls: cur %d, want 0", got)
	}
}
