package raftstore

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkAppend is the cost of one durable Append: one 100-byte entry
// and a hard state, fdatasync'd, on the test's temporary directory.
func BenchmarkAppend(b *testing.B) {
	s := mustCreate(b, b.TempDir(), "bench")
	defer s.Close()
	data := bytes.Repeat([]byte("x"), 100)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := uint64(1); i <= uint64(b.N); i++ {
		e := &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Data: data}
		if err := s.Append(hardState(1, 1, i-1), []*raftpb.Entry{e}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
