package raftstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestCreateOpenMetadata(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	if Exists(dir) {
		t.Fatal("Exists on a missing dir")
	}
	log, _ := newTestLog(t)
	if _, err := Open(dir, log); err == nil {
		t.Fatal("Open of a missing log succeeded")
	}
	s := mustCreate(t, dir, "cluster=7 node=3")
	if !Exists(dir) {
		t.Fatal("Exists after Create is false")
	}
	if _, err := Create(dir, []byte("other"), log); err == nil {
		t.Fatal("Create over an existing log succeeded")
	}
	// The WAL is locked while the store is open.
	if _, err := Open(dir, log); err == nil {
		t.Fatal("a second Open of an open store succeeded")
	}
	if got := string(s.Metadata()); got != "cluster=7 node=3" {
		t.Fatalf("Metadata %q", got)
	}
	v := wantLog(t, s, 1, 0, nil)
	wantHardState(t, v.hs, 0, 0, 0)

	s = reopen(t, s)
	defer s.Close()
	if got := string(s.Metadata()); got != "cluster=7 node=3" {
		t.Fatalf("Metadata after reopen %q", got)
	}
	v = wantLog(t, s, 1, 0, nil)
	wantHardState(t, v.hs, 0, 0, 0)
	if v.snapIndex != 0 || len(v.cs.GetVoters()) != 0 {
		t.Fatalf("new log has snapshot %d conf state %v", v.snapIndex, v.cs)
	}
	for _, sub := range []string{"wal", "snap"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() {
			t.Fatalf("%s/%s: %v", dir, sub, err)
		}
	}
}

func TestAppendRoundTrip(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	mustAppend(t, s, hardState(1, 1, 0), nil, nil)
	mustAppend(t, s, nil, ents(1, 3, 1), nil)
	mustAppend(t, s, hardState(1, 1, 2), ents(4, 5, 1), nil)
	mustAppend(t, s, &raftpb.HardState{}, ents(6, 6, 1), nil) // empty hard state: unchanged
	mustAppend(t, s, hardState(2, 3, 4), nil, nil)
	mustAppend(t, s, hardState(2, 3, 5), nil, nil) // commit only
	mustAppend(t, s, nil, nil, nil)                // nothing
	term1 := func(uint64) uint64 { return 1 }
	before := wantLog(t, s, 1, 6, term1)
	wantHardState(t, before.hs, 2, 3, 5)

	s = reopen(t, s)
	after := wantLog(t, s, 1, 6, term1)
	wantHardState(t, after.hs, 2, 3, 5)
	if string(s.Metadata()) != "m" {
		t.Fatalf("metadata %q", s.Metadata())
	}
	// And it goes on appending after a reopen.
	mustAppend(t, s, hardState(2, 3, 6), ents(7, 8, 2), nil)
	s = reopen(t, s)
	defer s.Close()
	v := wantLog(t, s, 1, 8, func(i uint64) uint64 { return map[bool]uint64{true: 1, false: 2}[i <= 6] })
	wantHardState(t, v.hs, 2, 3, 6)
}

// The classic deposed leader: entries 1..9 with 7..9 at term 2 never
// committed, then the new leader's entry 6 at term 3 replaces 6..9.
func TestOverwriteTail(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	mustAppend(t, s, hardState(1, 1, 5), ents(1, 6, 1), nil)
	mustAppend(t, s, hardState(2, 1, 5), ents(7, 9, 2), nil)
	mustAppend(t, s, hardState(3, 2, 5), ents(6, 6, 3), nil)
	termOf := func(i uint64) uint64 {
		if i == 6 {
			return 3
		}
		return 1
	}
	wantLog(t, s, 1, 6, termOf)
	s = reopen(t, s)
	v := wantLog(t, s, 1, 6, termOf)
	wantHardState(t, v.hs, 3, 2, 5)

	// A snapshot at the overwriting entry: the WAL, opened at index 6,
	// still holds 7..9 of term 2 after it; they must stay dropped.
	mustAppend(t, s, hardState(3, 2, 6), nil, nil)
	if err := s.SaveSnapshot(6, confState(1, 2, 3), []byte("state@6"), 0); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	v = wantLog(t, s, 7, 6, termOf)
	if v.snapIndex != 6 || v.snapTerm != 3 || v.snapData != "state@6" || v.terms[6] != 3 {
		t.Fatalf("snapshot %d/%d %q, term(6) %d", v.snapIndex, v.snapTerm, v.snapData, v.terms[6])
	}
	// The new leader's entries go on from there.
	mustAppend(t, s, hardState(3, 2, 8), ents(7, 8, 3), nil)
	s = reopen(t, s)
	defer s.Close()
	wantLog(t, s, 7, 8, func(uint64) uint64 { return 3 })
}

// An overwrite that reaches below a later snapshot's index: etcd's
// wal.ReadAll, opened at the snapshot, skips the overwriting entries and
// so brings back the entries they replaced.
func TestOverwriteBelowSnapshot(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	mustAppend(t, s, hardState(1, 1, 3), ents(1, 9, 1), nil)
	mustAppend(t, s, hardState(2, 2, 3), ents(4, 5, 2), nil) // 6..9 of term 1 dropped
	mustAppend(t, s, hardState(2, 2, 5), nil, nil)
	if err := s.SaveSnapshot(5, confState(1), []byte("s5"), 2); err != nil {
		t.Fatal(err)
	}
	termOf := func(i uint64) uint64 {
		if i >= 4 {
			return 2
		}
		return 1
	}
	wantLog(t, s, 4, 5, termOf) // two trailing entries kept in memory
	s = reopen(t, s)
	defer s.Close()
	v := wantLog(t, s, 6, 5, termOf)
	if v.snapIndex != 5 || v.snapTerm != 2 {
		t.Fatalf("snapshot %d/%d", v.snapIndex, v.snapTerm)
	}
}

// A snapshot from the leader replaces the log, including a stale tail
// beyond the snapshot's index.
func TestAppendReceivedSnapshot(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	mustAppend(t, s, hardState(1, 1, 5), ents(1, 7, 1), nil)
	mustAppend(t, s, hardState(2, 1, 5), ents(8, 9, 2), nil) // 8, 9 never committed

	// The leader of term 3 sends a snapshot at 8 whose entry 8 is of term 3.
	snap := snapshotAt(8, 3, confState(1, 2, 3), "leader@8")
	mustAppend(t, s, hardState(3, 0, 8), nil, snap)
	check := func(s *Store, last uint64) view {
		t.Helper()
		v := wantLog(t, s, 9, last, func(uint64) uint64 { return 3 })
		if v.snapIndex != 8 || v.snapTerm != 3 || v.snapData != "leader@8" || v.terms[8] != 3 {
			t.Fatalf("snapshot %d/%d %q, term(8) %d", v.snapIndex, v.snapTerm, v.snapData, v.terms[8])
		}
		if !proto.Equal(v.cs, raftpb.EnsureConfState(confState(1, 2, 3))) {
			t.Fatalf("conf state %v", v.cs)
		}
		return v
	}
	check(s, 8)
	s = reopen(t, s)
	v := check(s, 8) // not 9: the stale entry 9 of term 2 stays dropped
	wantHardState(t, v.hs, 3, 0, 8)

	mustAppend(t, s, hardState(3, 0, 10), ents(9, 11, 3), nil)
	s = reopen(t, s)
	check(s, 11)

	// A snapshot beyond the log's end, with entries after it in the same
	// Append; a commit index below the snapshot is raised to it.
	snap = snapshotAt(20, 4, confState(1, 2), "leader@20")
	mustAppend(t, s, hardState(4, 0, 3), ents(21, 22, 4), snap)
	s = reopen(t, s)
	defer s.Close()
	v = wantLog(t, s, 21, 22, func(uint64) uint64 { return 4 })
	if v.snapIndex != 20 || v.snapData != "leader@20" || v.terms[20] != 4 {
		t.Fatalf("snapshot %d %q term(20) %d", v.snapIndex, v.snapData, v.terms[20])
	}
	wantHardState(t, v.hs, 4, 0, 20)

	// An older snapshot is refused and changes nothing.
	if err := s.Append(nil, nil, snapshotAt(15, 4, nil, "old")); !isSnapOutOfDate(err) {
		t.Fatalf("Append of an older snapshot: %v", err)
	}
	wantLog(t, s, 21, 22, func(uint64) uint64 { return 4 })
}

func TestSaveSnapshotCompactionAndRelease(t *testing.T) {
	setSegmentSize(t, 16<<10) // many segments
	dir := t.TempDir()
	s := mustCreate(t, dir, "meta")
	big := strings.Repeat("x", 900)
	for i := uint64(1); i <= 300; i++ {
		mustAppend(t, s, hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "d"+big)}, nil)
	}
	names, err := walNames(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	startSegments := len(names)
	var snaps []snapFile
	if startSegments < 10 {
		t.Fatalf("only %d WAL segments; the test wants many", startSegments)
	}

	if err := s.SaveSnapshot(50, confState(1, 2, 3), []byte("s50"), 10); err != nil {
		t.Fatal(err)
	}
	v := viewOf(t, s)
	if v.first != 41 || v.last != 300 || v.snapIndex != 50 || v.snapData != "s50" {
		t.Fatalf("after SaveSnapshot(50, trailing 10): log %d..%d snapshot %d %q", v.first, v.last, v.snapIndex, v.snapData)
	}
	if err := s.SaveSnapshot(50, nil, []byte("again"), 0); !isSnapOutOfDate(err) {
		t.Fatalf("SaveSnapshot at the same index: %v", err)
	}
	if err := s.SaveSnapshot(301, nil, nil, 0); err == nil {
		t.Fatal("SaveSnapshot past the last index succeeded")
	}
	for _, idx := range []uint64{100, 150, 200, 250} {
		if err := s.SaveSnapshot(idx, nil, []byte("s"+itoa(idx)), 5); err != nil { // nil: conf state kept
			t.Fatal(err)
		}
	}
	v = viewOf(t, s)
	if v.first != 246 || v.last != 300 || v.snapIndex != 250 || v.terms[245] != 1 {
		t.Fatalf("after SaveSnapshot(250, trailing 5): log %d..%d snapshot %d", v.first, v.last, v.snapIndex)
	}
	if !proto.Equal(v.cs, raftpb.EnsureConfState(confState(1, 2, 3))) {
		t.Fatalf("conf state %v", v.cs)
	}
	snaps, err = snapFiles(filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != keepSnapshots || snaps[0].index != 250 || snaps[len(snaps)-1].index != 150 {
		t.Fatalf("snapshot files %v, want the newest %d (250, 200, 150)", snaps, keepSnapshots)
	}
	// The WAL is kept from the segment holding index 150 (the oldest kept
	// snapshot) on, and no further back.
	names, err = walNames(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 2 || names[0].index > 150 || names[1].index <= 150 {
		t.Fatalf("WAL segments %v (of %d): want the first one to be the last starting at or below 150", names, startSegments)
	}
	before := viewOf(t, s)

	s = reopen(t, s)
	defer s.Close()
	after := viewOf(t, s)
	// After a reopen the log starts right after the snapshot, as in etcd.
	if after.first != 251 || after.last != before.last || after.snapIndex != 250 || after.snapData != "s250" ||
		!proto.Equal(after.hs, before.hs) || !proto.Equal(after.cs, before.cs) {
		t.Fatalf("after reopen: log %d..%d snapshot %d %q hs %v cs %v; before: log %d..%d hs %v cs %v",
			after.first, after.last, after.snapIndex, after.snapData, after.hs, after.cs, before.first, before.last, before.hs, before.cs)
	}
	for i := after.first - 1; i <= after.last; i++ {
		if after.terms[i] != before.terms[i] || (i >= after.first && after.data[i] != before.data[i]) {
			t.Fatalf("entry %d differs after reopen", i)
		}
	}
	if string(s.Metadata()) != "meta" {
		t.Fatalf("metadata %q", s.Metadata())
	}
}

func itoa(i uint64) string { return strconv.FormatUint(i, 10) }

// SaveSnapshot of an index above the commit index on disk (raft's
// asynchronous writes let the application apply before the hard state is
// written) raises the commit index, so the snapshot counts on Open.
func TestSaveSnapshotRaisesCommit(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	mustAppend(t, s, hardState(1, 1, 4), ents(1, 10, 1), nil)
	if err := s.SaveSnapshot(8, confState(1), []byte("s8"), 0); err != nil {
		t.Fatal(err)
	}
	wantHardState(t, viewOf(t, s).hs, 1, 1, 8)
	// A later hard state with an older commit does not lower it.
	mustAppend(t, s, hardState(1, 1, 6), nil, nil)
	s = reopen(t, s)
	defer s.Close()
	v := wantLog(t, s, 9, 10, func(uint64) uint64 { return 1 })
	wantHardState(t, v.hs, 1, 1, 8)
	if v.snapIndex != 8 || v.snapData != "s8" {
		t.Fatalf("snapshot %d %q", v.snapIndex, v.snapData)
	}
}

func TestAppendRefusesBadInput(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	defer s.Close()
	mustAppend(t, s, hardState(1, 1, 2), ents(1, 5, 1), nil)
	if err := s.SaveSnapshot(2, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func() error{
		"gap":              func() error { return s.Append(nil, ents(7, 8, 1), nil) },
		"not consecutive":  func() error { return s.Append(nil, []*raftpb.Entry{ent(6, 1, ""), ent(8, 1, "")}, nil) },
		"below snapshot":   func() error { return s.Append(nil, ents(2, 3, 2), nil) },
		"commit past last": func() error { return s.Append(hardState(1, 1, 9), nil, nil) },
		"snapshot matching the log": func() error {
			return s.Append(nil, nil, snapshotAt(4, 1, nil, "x"))
		},
	}
	for name, f := range bad {
		if err := f(); err == nil {
			t.Errorf("%s: Append succeeded", name)
		}
	}
	// Nothing changed, and the store still works.
	wantLog(t, s, 3, 5, func(uint64) uint64 { return 1 })
	mustAppend(t, s, nil, ents(6, 6, 1), nil)
	wantLog(t, s, 3, 6, func(uint64) uint64 { return 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(nil, ents(7, 7, 1), nil); err != ErrClosed {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := s.SaveSnapshot(6, nil, nil, 0); err != ErrClosed {
		t.Fatalf("SaveSnapshot after Close: %v", err)
	}
}

// SaveSnapshot on another goroutine than Append (run with -race).
func TestSaveSnapshotConcurrentWithAppend(t *testing.T) {
	setSegmentSize(t, 32<<10)
	s := mustCreate(t, t.TempDir(), "m")
	var (
		wg      sync.WaitGroup
		applied = make(chan uint64, 1000)
		errs    = make(chan error, 2)
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		for idx := range applied {
			if idx-last < 20 {
				continue
			}
			if err := s.SaveSnapshot(idx, confState(1), []byte("s"+itoa(idx)), 3); err != nil {
				errs <- err
				return
			}
			last = idx
		}
	}()
	const n = 400
	for i := uint64(1); i <= n; i++ {
		if err := s.Append(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "d"+strings.Repeat("y", int(i%200)))}, nil); err != nil {
			t.Fatal(err)
		}
		// raft reads concurrently with both writers.
		if _, err := s.Entries(i, i+1, 1<<20); err != nil && err != raft.ErrCompacted {
			t.Fatal(err)
		}
		applied <- i
	}
	close(applied)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	before := viewOf(t, s)
	if before.snapIndex < n-40 {
		t.Fatalf("snapshot at %d", before.snapIndex)
	}
	s = reopen(t, s)
	defer s.Close()
	after := viewOf(t, s)
	if after.first != before.snapIndex+1 || after.last != n || after.snapIndex != before.snapIndex || after.hs.GetCommit() != n {
		t.Fatalf("after reopen: log %d..%d snapshot %d commit %d; before: snapshot %d", after.first, after.last, after.snapIndex, after.hs.GetCommit(), before.snapIndex)
	}
}
