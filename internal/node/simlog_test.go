package node

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// simLog is the simulation's Log: a raft.MemoryStorage that holds what
// reached "disk". A write is durable when Append returns; the simulation
// decides when that happens (a slow or stalled fsync is a write that has
// not returned yet) and what a crash in the middle of one leaves (tear).
type simLog struct {
	*raft.MemoryStorage
}

func newSimLog() *simLog { return &simLog{MemoryStorage: raft.NewMemoryStorage()} }

func (l *simLog) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	if !raft.IsEmptySnap(snap) {
		if err := l.ApplySnapshot(proto.Clone(snap).(*raftpb.Snapshot)); err != nil {
			return err
		}
	}
	if len(ents) > 0 {
		cl := make([]*raftpb.Entry, len(ents))
		for i, e := range ents {
			cl[i] = proto.Clone(e).(*raftpb.Entry)
		}
		if err := l.MemoryStorage.Append(cl); err != nil {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		return l.SetHardState(proto.Clone(hs).(*raftpb.HardState))
	}
	return nil
}

// tear applies what a crash during Append may have left on disk: the first
// n entries of the write and no hard state (the hard state is written last).
func (l *simLog) tear(ents []*raftpb.Entry, n int) {
	if n > len(ents) {
		n = len(ents)
	}
	if n > 0 {
		_ = l.Append(nil, ents[:n], nil)
	}
}

func (l *simLog) SaveSnapshot(index uint64, cs *raftpb.ConfState, data []byte, trailing uint64) error {
	if _, err := l.CreateSnapshot(index, proto.Clone(cs).(*raftpb.ConfState), append([]byte(nil), data...)); err != nil {
		return err
	}
	if index > trailing {
		if err := l.Compact(index - trailing); err != nil && err != raft.ErrCompacted {
			return err
		}
	}
	return nil
}

var _ Log = (*simLog)(nil)
