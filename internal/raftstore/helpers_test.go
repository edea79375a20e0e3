package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// testLog collects a test's log lines and shows them if the test fails.
type testLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newTestLog(t testing.TB) (*slog.Logger, *testLog) {
	tl := &testLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("store log:\n%s", tl.String())
		}
	})
	return slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelDebug})), tl
}

func ent(index, term uint64, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: new(index), Term: new(term), Type: new(raftpb.EntryType_EntryNormal), Data: []byte(data)}
}

// ents makes entries lo..hi at term, with data "d<index>/<term>".
func ents(lo, hi, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, ent(i, term, fmt.Sprintf("d%d/%d", i, term)))
	}
	return out
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func confState(voters ...uint64) *raftpb.ConfState {
	return &raftpb.ConfState{Voters: voters}
}

func snapshotAt(index, term uint64, cs *raftpb.ConfState, data string) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: []byte(data), Metadata: &raftpb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: cs}}
}

func mustCreate(t testing.TB, dir string, meta string) *Store {
	t.Helper()
	log, _ := newTestLog(t)
	s, err := Create(dir, []byte(meta), log)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return s
}

func mustOpen(t testing.TB, dir string) *Store {
	t.Helper()
	log, _ := newTestLog(t)
	s, err := Open(dir, log)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustAppend(t testing.TB, s *Store, hs *raftpb.HardState, es []*raftpb.Entry, snap *raftpb.Snapshot) {
	t.Helper()
	if err := s.Append(hs, es, snap); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return mustOpen(t, s.Dir())
}

// view is everything raft can read from a raft.Storage.
type view struct {
	first, last uint64
	terms       map[uint64]uint64 // FirstIndex()-1 .. LastIndex()
	data        map[uint64]string // FirstIndex() .. LastIndex()
	hs          *raftpb.HardState
	cs          *raftpb.ConfState
	snapIndex   uint64
	snapTerm    uint64
	snapData    string
}

func viewOf(t testing.TB, s raft.Storage) view {
	t.Helper()
	var v view
	var err error
	if v.hs, v.cs, err = s.InitialState(); err != nil {
		t.Fatal(err)
	}
	if v.first, err = s.FirstIndex(); err != nil {
		t.Fatal(err)
	}
	if v.last, err = s.LastIndex(); err != nil {
		t.Fatal(err)
	}
	v.terms = map[uint64]uint64{}
	v.data = map[uint64]string{}
	for i := v.first - 1; i <= v.last; i++ {
		if v.terms[i], err = s.Term(i); err != nil {
			t.Fatalf("Term(%d) with first %d last %d: %v", i, v.first, v.last, err)
		}
	}
	if v.last >= v.first {
		es, err := s.Entries(v.first, v.last+1, 1<<62)
		if err != nil {
			t.Fatalf("Entries(%d, %d): %v", v.first, v.last+1, err)
		}
		if uint64(len(es)) != v.last-v.first+1 {
			t.Fatalf("Entries(%d, %d) returned %d entries", v.first, v.last+1, len(es))
		}
		for i, e := range es {
			if e.GetIndex() != v.first+uint64(i) {
				t.Fatalf("entry %d of Entries(%d, ...) has index %d: not contiguous", i, v.first, e.GetIndex())
			}
			if e.GetTerm() != v.terms[e.GetIndex()] {
				t.Fatalf("entry %d: term %d, Term() says %d", e.GetIndex(), e.GetTerm(), v.terms[e.GetIndex()])
			}
			v.data[e.GetIndex()] = string(e.GetData())
		}
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	v.snapIndex, v.snapTerm, v.snapData = snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm(), string(snap.GetData())
	if v.snapIndex != 0 && v.snapIndex < v.first-1 {
		t.Fatalf("snapshot at %d below the first index %d - 1", v.snapIndex, v.first)
	}
	return v
}

// wantLog checks that s holds exactly entries first..last with the given
// terms (term of index i: terms[i-first]), data as ents() makes it.
func wantLog(t testing.TB, s raft.Storage, first, last uint64, termOf func(i uint64) uint64) view {
	t.Helper()
	v := viewOf(t, s)
	if v.first != first || v.last != last {
		t.Fatalf("log is %d..%d, want %d..%d", v.first, v.last, first, last)
	}
	for i := first; i <= last; i++ {
		want := fmt.Sprintf("d%d/%d", i, termOf(i))
		if v.terms[i] != termOf(i) || v.data[i] != want {
			t.Fatalf("entry %d: term %d data %q, want term %d data %q", i, v.terms[i], v.data[i], termOf(i), want)
		}
	}
	return v
}

func wantHardState(t testing.TB, got *raftpb.HardState, term, vote, commit uint64) {
	t.Helper()
	if got.GetTerm() != term || got.GetVote() != vote || got.GetCommit() != commit {
		t.Fatalf("hard state term %d vote %d commit %d, want %d %d %d", got.GetTerm(), got.GetVote(), got.GetCommit(), term, vote, commit)
	}
}

// setSegmentSize makes WAL segments small for a test, so it crosses
// segment boundaries (wal.SegmentSizeBytes is a package variable; the
// tests that change it do not run in parallel).
func setSegmentSize(t testing.TB, n int64) {
	old := wal.SegmentSizeBytes
	wal.SegmentSizeBytes = n
	t.Cleanup(func() { wal.SegmentSizeBytes = old })
}

func isSnapOutOfDate(err error) bool { return errors.Is(err, raft.ErrSnapOutOfDate) }
