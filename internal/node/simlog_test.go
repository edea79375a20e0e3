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
	synced *raftpb.HardState // the hard state on disk (SetHardState may leave a newer one unsynced)
	lazy   bool              // SetHardState syncs nothing, not even a new term or vote
}

func newSimLog() *simLog {
	return &simLog{MemoryStorage: raft.NewMemoryStorage(), synced: &raftpb.HardState{}}
}

// SetHardState records hs at once but leaves a commit-only change (any
// change, if lazy) unsynced: a crash before the next Append loses it (see
// crash).
func (l *simLog) SetHardState(hs *raftpb.HardState) error {
	hs = proto.Clone(hs).(*raftpb.HardState)
	if !l.lazy && (hs.GetTerm() != l.synced.GetTerm() || hs.GetVote() != l.synced.GetVote()) {
		l.synced = hs
	}
	return l.MemoryStorage.SetHardState(hs)
}

// crash drops what was not synced.
func (l *simLog) crash() {
	_ = l.MemoryStorage.SetHardState(proto.Clone(l.synced).(*raftpb.HardState))
}

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
		l.synced = proto.Clone(hs).(*raftpb.HardState)
		return l.MemoryStorage.SetHardState(proto.Clone(hs).(*raftpb.HardState))
	}
	st, _, _ := l.InitialState()
	l.synced = proto.Clone(st).(*raftpb.HardState) // an Append syncs what SetHardState left
	return nil
}

// tear applies what a crash during Append may have left on disk: the first
// n entries of the write and no hard state (the hard state is written last).
func (l *simLog) tear(ents []*raftpb.Entry, n int) {
	if n > len(ents) {
		n = len(ents)
	}
	if n > 0 {
		synced := l.synced
		_ = l.Append(nil, ents[:n], nil)
		l.synced = synced
	}
}

// SaveSnapshot raises the durable commit index to the snapshot's, as
// internal/raftstore does (a node applies, and so snapshots, entries whose
// commit index may not be on disk yet).
func (l *simLog) SaveSnapshot(index uint64, cs *raftpb.ConfState, data []byte, trailing uint64) error {
	st, _, _ := l.InitialState()
	if st.GetCommit() < index {
		st = proto.Clone(st).(*raftpb.HardState)
		st.Commit = new(index)
		if err := l.MemoryStorage.SetHardState(st); err != nil {
			return err
		}
	}
	if l.synced.GetCommit() < index {
		l.synced = proto.Clone(l.synced).(*raftpb.HardState)
		l.synced.Commit = new(index)
	}
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
