package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor, headroom uint64
		want                  int
	}{
		{0, 64 * mib, 256 * mib, 100},              // no collection yet: the default
		{8 * mib, 64 * mib, 256 * mib, 700},        // 8 MiB grows to 64 MiB: 8 × (1 + 7)
		{16 * mib, 64 * mib, 256 * mib, 300},       // 16 × (1 + 3)
		{31 * mib, 64 * mib, 256 * mib, 106},       // just under half the floor
		{32 * mib, 64 * mib, 256 * mib, 100},       // half the floor: the default
		{1, 64 * mib, 256 * mib, 64*mib*100 - 100}, // tiny: still exactly the floor
		{256 * mib, 64 * mib, 256 * mib, 100},      // live = headroom: the default, 2× live
		{500 * mib, 64 * mib, 0, 100},              // no cap: the default
		{500 * mib, 64 * mib, 256 * mib, 51},       // 500 MiB grows by 256 MiB, not 500
		{512 * mib, 64 * mib, 256 * mib, 50},       // 512 × 1.5
		{1024 * mib, 64 * mib, 256 * mib, 25},      // 1 GiB × 1.25
		{4096 * mib, 64 * mib, 256 * mib, 25},      // never below MinPercent
	} {
		if got := Percent(c.live, c.floor, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.floor, c.headroom, got, c.want)
		}
	}
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestKeepRaisesAndRestores(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment: Keep leaves it alone (TestKeepLeavesGOGCAlone)")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()                             // the live heap is known after a collection
	stop := Keep(1<<40, 0, time.Millisecond) // a floor no test heap reaches
	for deadline := time.Now().Add(10 * time.Second); gogc() <= 100; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("GOGC not raised for a heap far below the floor")
		}
	}
	stop()
	if g := gogc(); g != 100 {
		t.Fatalf("GOGC %d after stop, want the default 100", g)
	}
}

func TestKeepLeavesGOGCAlone(t *testing.T) {
	t.Setenv("GOGC", "150")
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	// Had Keep started adjusting, stop (which waits for it) would find
	// GOGC raised, or set back to 100.
	Keep(1<<40, 0, time.Millisecond)()
	if g := gogc(); g != 150 {
		t.Fatalf("GOGC %d with GOGC=150 in the environment, want 150 untouched", g)
	}
}

// TestKeepCapsHeadroom: with a live heap above the headroom, Keep lowers
// GOGC below the default, and stop gives the default back.
func TestKeepCapsHeadroom(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment: Keep leaves it alone (TestKeepLeavesGOGCAlone)")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	live := make([]byte, 64<<20)
	for i := range live {
		live[i] = byte(i)
	}
	runtime.GC()
	stop := Keep(1<<20, 16<<20, time.Millisecond) // 64 MiB live, 16 MiB headroom: GOGC 25
	for gogc() >= 100 {
		time.Sleep(time.Millisecond)
	}
	stop()
	runtime.KeepAlive(live)
	if g := gogc(); g != 100 {
		t.Fatalf("GOGC %d after stop, want the default 100", g)
	}
}
