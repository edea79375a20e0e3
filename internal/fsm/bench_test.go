package fsm

import (
	"encoding/binary"
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
			c := Command{Kind: kind, RequestID: req, Lease: id(1), Name: names[(i/2)%len(names)]}
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
			c := Command{Kind: KindPut, Name: "k", Value: v, Token: 1}
			s.Apply(&c)
		}
	})
}

// BenchmarkCodec measures encoding and decoding a 256-command batch (b.N counts commands).
func BenchmarkCodec(b *testing.B) {
	cmds := make([]Command, 256)
	for i := range cmds {
		cmds[i] = Command{Kind: KindAcquire, RequestID: req(byte(i)), Lease: id(1), Name: "jobs/" + strconv.Itoa(i), Wait: true, LockDelay: time.Second}
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
