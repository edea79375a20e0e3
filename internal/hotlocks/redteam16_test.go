package hotlocks

import (
	"strconv"
	"testing"
	"time"
)

// Top runs under the node's state lock (the apply path waits for it) and
// for any caller with a read right: asking for the top 20 of a large
// sketch (--hot-locks up to 1,000,000) must not copy and sort every
// tracked name. Its allocations follow n, not K.
func TestTopAllocatesForNNotK(t *testing.T) {
	const k = 50_000
	s := New(k, time.Hour)
	for i := range k {
		for range i % 7 {
			s.Granted("n-"+strconv.Itoa(i), 0)
		}
	}
	if top := s.Top(20, 0, nil); len(top) != 20 || top[0].Score != 6 || top[0].Name != "n-1000" {
		t.Fatalf("top = %v", top[:min(3, len(top))])
	}
	bytes := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			s.Top(20, 0, nil)
		}
	}).AllocedBytesPerOp()
	if bytes > 64<<10 {
		t.Fatalf("Top(20) of %d names allocates %d bytes a call: it copies every name", k, bytes)
	}
}
