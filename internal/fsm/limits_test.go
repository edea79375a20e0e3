package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateEdges: each hard limit accepts its own value and refuses one
// step past it (limits.go), with ErrInvalid.
func TestValidateEdges(t *testing.T) {
	acq := func(edit func(*Command)) Command {
		c := Command{Kind: KindAcquire, RequestID: RequestID{1}, Lease: LeaseID{1}, Seq: 5, Ack: 1, Name: "n"}
		edit(&c)
		return c
	}
	create := func(ttl time.Duration, owner string) Command {
		return Command{Kind: KindCreateLease, RequestID: RequestID{1}, Lease: LeaseID{1}, TTL: ttl, Owner: owner}
	}
	put := func(n int) Command {
		return Command{Kind: KindPut, RequestID: RequestID{1}, Name: "k", Value: make([]byte, n), Token: 1}
	}
	tick := func(d time.Duration) Command { return Command{Kind: KindTick, Elapsed: d} }
	for _, tc := range []struct {
		name string
		c    Command
		ok   bool
	}{
		{"ttl at the minimum", create(time.Millisecond, ""), true},
		{"ttl below the minimum", create(time.Millisecond-1, ""), false},
		{"ttl at the maximum", create(24*time.Hour, ""), true},
		{"ttl above the maximum", create(24*time.Hour+1, ""), false},
		{"owner of 256 bytes", create(time.Second, strings.Repeat("o", 256)), true},
		{"owner of 257 bytes", create(time.Second, strings.Repeat("o", 257)), false},
		{"owner with a control character", create(time.Second, "a\tb"), false},
		{"lock-delay 0", acq(func(c *Command) {}), true},
		{"lock-delay at the maximum", acq(func(c *Command) { c.LockDelay = 10 * time.Minute }), true},
		{"lock-delay above the maximum", acq(func(c *Command) { c.LockDelay = 10*time.Minute + 1 }), false},
		{"negative lock-delay", acq(func(c *Command) { c.LockDelay = -1 }), false},
		{"ack equal to seq", acq(func(c *Command) { c.Ack = 5 }), true},
		{"ack above seq", acq(func(c *Command) { c.Ack = 6 }), false},
		{"seq 0", acq(func(c *Command) { c.Seq = 0 }), false},
		{"no lease", acq(func(c *Command) { c.Lease = LeaseID{} }), false},
		{"no request id", acq(func(c *Command) { c.RequestID = RequestID{} }), false},
		{"name of 256 bytes", acq(func(c *Command) { c.Name = strings.Repeat("n", 256) }), true},
		{"name of 257 bytes", acq(func(c *Command) { c.Name = strings.Repeat("n", 257) }), false},
		{"name empty", acq(func(c *Command) { c.Name = "" }), false},
		{"name not UTF-8", acq(func(c *Command) { c.Name = "\xff" }), false},
		{"name with DEL", acq(func(c *Command) { c.Name = "a\x7f" }), false},
		{"a field of another kind", acq(func(c *Command) { c.Token = 1 }), false},
		{"value at the limit", put(1 << 20), true},
		{"value past the limit", put(1<<20 + 1), false},
		{"put with token 0", Command{Kind: KindPut, RequestID: RequestID{1}, Name: "k", Value: []byte("v")}, false},
		{"tick 0", tick(0), true},
		{"tick of a minute", tick(time.Minute), true},
		{"tick above a minute", tick(time.Minute + 1), false},
		{"negative tick", tick(-1), false},
		{"set-node", Command{Kind: KindSetNode, Name: "n1", Addr: "h:1"}, true},
		{"set-node without address", Command{Kind: KindSetNode, Name: "n1"}, false},
		{"unknown kind", Command{Kind: 13}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate: %v, want ErrInvalid", err)
			}
		})
	}
}
