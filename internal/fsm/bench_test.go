package fsm

import (
	"encoding/binary"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkApply measures one command through Apply: an acquire+release
// cycle on many locks (b.N counts commands), a renewal, a put.
func BenchmarkApply(b *testing.B) {
	b.Run("acquire-release", func(b *testing.B) {
		s := New()
		c := cmdCreate(1, 1)
		s.Apply(&c)
		names := make([]string, 1024)
		for i := range names {
			names[i] = "lock/" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var req RequestID
			binary.LittleEndian.PutUint64(req[:], uint64(i)+2)
			kind := KindAcquire
			if i%2 == 1 {
				kind = KindRelease
			}
			seq := uint64(i) + 1
			c := Command{Kind: kind, RequestID: req, Lease: id(1), Seq: seq, Ack: seq, Name: names[(i/2)%len(names)]}
			if r := s.Apply(&c); r.Code != OK {
				b.Fatal(r.Code)
			}
		}
	})
	b.Run("renew", func(b *testing.B) {
		s := New()
		for l := byte(1); l <= 100; l++ {
			c := cmdCreate(l, l)
			s.Apply(&c)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := Command{Kind: KindRenew, Lease: id(byte(i%100 + 1))}
			s.Apply(&c)
		}
	})
	b.Run("put", func(b *testing.B) {
		s := New()
		c, a := cmdCreate(1, 1), cmdAcquire(1, 2, "a", false)
		s.Apply(&c)
		s.Apply(&a)
		v := make([]byte, 100)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := Command{Kind: KindPut, RequestID: req(2), Name: "k", Value: v, Token: 1}
			s.Apply(&c)
		}
	})
}

// BenchmarkCodec measures encoding and decoding a 256-command batch (b.N counts commands).
func BenchmarkCodec(b *testing.B) {
	cmds := make([]Command, 256)
	for i := range cmds {
		cmds[i] = Command{Kind: KindAcquire, RequestID: RequestID{byte(i >> 8), byte(i), 1}, Lease: id(1), Seq: uint64(i) + 1, Name: "jobs/" + strconv.Itoa(i), Wait: true, LockDelay: time.Second}
	}
	buf := EncodeBatch(nil, cmds)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i += len(cmds) {
			buf = EncodeBatch(buf[:0], cmds)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i += len(cmds) {
			if _, err := DecodeBatch(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMillionLeases builds a state with 1,000,000 live leases (each
// with a realistic owner label and request id; every tenth holds a lock)
// and measures what a server pays for it: heap held by the state, and the
// time to snapshot (Marshal) and restore (Unmarshal) it. Run it alone:
//
//	go test ./internal/fsm -run XXX -bench MillionLeases -benchtime 1x
func BenchmarkMillionLeases(b *testing.B) {
	const n = 1_000_000
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := New()
		for j := range n {
			var lid LeaseID
			var rid RequestID
			binary.LittleEndian.PutUint64(lid[:], uint64(j)+1)
			binary.LittleEndian.PutUint64(lid[8:], uint64(j)*0x9e3779b97f4a7c15)
			binary.LittleEndian.PutUint64(rid[:], uint64(j)+1)
			c := Command{Kind: KindCreateLease, RequestID: rid, Lease: lid, TTL: 30 * time.Second, Owner: "host-" + strconv.Itoa(j%5000) + "/" + strconv.Itoa(j)}
			if r := s.Apply(&c); r.Code != OK {
				b.Fatal(r.Code, r.Reason)
			}
			if j%10 == 0 {
				binary.LittleEndian.PutUint64(rid[8:], 1)
				a := Command{Kind: KindAcquire, RequestID: rid, Lease: lid, Seq: 1, Ack: 1, Name: "job/" + strconv.Itoa(j)}
				if r := s.Apply(&a); r.Code != OK {
					b.Fatal(r.Code, r.Reason)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		t0 := time.Now()
		snap := s.Marshal(nil)
		marshal := time.Since(t0)
		t0 = time.Now()
		if _, err := Unmarshal(snap); err != nil {
			b.Fatal(err)
		}
		unmarshal := time.Since(t0)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(len(snap))/(1<<20), "snapshot-MiB")
		b.ReportMetric(marshal.Seconds(), "marshal-s")
		b.ReportMetric(unmarshal.Seconds(), "unmarshal-s")
		runtime.KeepAlive(s)
	}
}
