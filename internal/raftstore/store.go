package raftstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

const (
	walDirName  = "wal"
	snapDirName = "snap"
	// keepSnapshots is how many snapshot files SaveSnapshot keeps; the WAL
	// is kept back to the oldest of them, so Open can fall back to any.
	keepSnapshots = 3
)

// ErrClosed is returned by Append and SaveSnapshot after Close.
var ErrClosed = errors.New("raftstore: store is closed")

// Store is a raft node's durable state in one directory: etcd's WAL (hard
// state and entries, fsynced) and snapshot files, plus an in-memory
// raft.Storage view of them for the raft library to read.
//
// *Store implements raft.Storage (InitialState, Entries, Term, LastIndex,
// FirstIndex, Snapshot); those methods read only the memory view and may
// be called from any goroutine. Append and SaveSnapshot write the disk and
// then the memory view; they are serialized by an internal mutex, so
// SaveSnapshot may run on another goroutine than Append (each waits for the
// other's disk writes). Reads of the memory view do not wait for disk
// writes: they take only the memory view's own lock.
//
// The first disk write that fails makes the store unusable: Append and
// SaveSnapshot return that error from then on (what the failed write left
// on disk is unknown until the store is reopened).
type Store struct {
	dir  string
	log  *slog.Logger
	zl   *zap.Logger
	meta []byte

	// ms is the memory view. It has its own lock, which raft's reads take.
	// Its snapshot is the newest snapshot's metadata without the data:
	// Snapshot reads the data from the snapshot file when raft needs it
	// (to send to a follower), so the store does not keep a copy as large
	// as the state in memory for the rare follower that falls behind.
	ms *raft.MemoryStorage

	// mu serializes the writers (Append, SaveSnapshot, Close) and guards
	// the fields below. A writer holds it across its disk writes and the
	// memory updates that follow, so the memory view changes in the same
	// order as the disk.
	mu  sync.Mutex
	w   *wal.WAL
	ss  *snap.Snapshotter
	hs  *raftpb.HardState // last hard state written to the WAL; never nil, never mutated
	cs  *raftpb.ConfState // conf state of the newest snapshot; never nil
	si  uint64            // index of the newest snapshot (0: none)
	err error             // first write failure, or ErrClosed
}

var _ raft.Storage = (*Store)(nil)

// Exists reports whether dir already holds a raft log (a WAL in dir/wal).
func Exists(dir string) bool {
	return wal.Exist(filepath.Join(dir, walDirName))
}

// Create makes a new, empty log in dir, which is created if missing and
// must not hold a log already. meta is opaque to the store (the caller
// keeps its cluster and node identity there); it is written at the head of
// every WAL segment and returned by Metadata after Open. log receives the
// store's messages (nil: slog.Default()).
func Create(dir string, meta []byte, log *slog.Logger) (*Store, error) {
	log, zl := loggers(log)
	if Exists(dir) {
		return nil, fmt.Errorf("raftstore: create %s: a raft log already exists there", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	snapDir := filepath.Join(dir, snapDirName)
	if err := fileutil.TouchDirAll(zl, snapDir); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	if names, err := snapFiles(snapDir); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	} else if len(names) > 0 {
		return nil, fmt.Errorf("raftstore: create %s: %s holds snapshot files but there is no WAL; refusing to start a new log beside them", dir, snapDir)
	}
	// wal.Create writes the WAL in a temporary directory, renames it into
	// place and fsyncs dir; sync dir's parent too, for a new dir.
	w, err := wal.Create(zl, filepath.Join(dir, walDirName), meta)
	if err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	if err := syncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
		w.Close()
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	s := &Store{
		dir:  dir,
		log:  log,
		zl:   zl,
		meta: meta,
		ms:   raft.NewMemoryStorage(),
		w:    w,
		ss:   snap.New(zl, snapDir),
		hs:   &raftpb.HardState{},
		cs:   raftpb.EnsureConfState(nil),
	}
	s.ms.SetHardState(&raftpb.HardState{})
	log.Info("raftstore: created raft log", "dir", dir)
	return s, nil
}

// Open opens the log in dir: it loads the newest valid snapshot, then the
// hard state and the entries after that snapshot, into the memory view. A
// torn record at the end of the WAL (a write cut short by a crash) is cut
// off with wal.Repair and logged at warning level; any other damage is an
// error. A snapshot file that cannot be read is set aside by etcd (renamed
// .broken) and the next older valid snapshot is used, with a warning.
// log receives the store's messages (nil: slog.Default()).
func Open(dir string, log *slog.Logger) (*Store, error) {
	log, zl := loggers(log)
	if !Exists(dir) {
		return nil, fmt.Errorf("raftstore: open %s: no raft log there", dir)
	}
	walDir := filepath.Join(dir, walDirName)
	snapDir := filepath.Join(dir, snapDirName)
	if err := fileutil.TouchDirAll(zl, snapDir); err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}

	// The snapshot records of the WAL at or below its last commit index,
	// oldest first, and the newest of them whose file reads back.
	walSnaps, err := wal.ValidSnapshotEntries(zl, walDir)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: the WAL is corrupt (reading its snapshot records): %w", dir, err)
	}
	ss := snap.New(zl, snapDir)
	snapshot, err := ss.LoadNewestAvailable(walSnaps)
	switch {
	case errors.Is(err, snap.ErrNoSnapshot):
		snapshot = nil
	case err != nil:
		return nil, fmt.Errorf("raftstore: open %s: loading snapshot: %w", dir, err)
	}
	var newestRecord uint64
	for _, ws := range walSnaps {
		newestRecord = max(newestRecord, ws.GetIndex())
	}
	fallback := "" // said in errors when an older snapshot than recorded is used
	if got := snapshot.GetMetadata().GetIndex(); got < newestRecord {
		fallback = fmt.Sprintf(" (the snapshot recorded at index %d has no readable file, so the log must reach back to index %d)", newestRecord, got)
		log.Warn("raftstore: the newest snapshot recorded in the WAL has no readable snapshot file; using an older one (unreadable files are renamed .broken)",
			"dir", dir, "recorded_index", newestRecord, "used_index", got)
	}

	start := &walpb.Snapshot{Index: new(uint64(0)), Term: new(uint64(0))}
	if snapshot != nil {
		start.Index = new(snapshot.GetMetadata().GetIndex())
		start.Term = new(snapshot.GetMetadata().GetTerm())
	}
	var (
		w      *wal.WAL
		meta   []byte
		st     *raftpb.HardState
		ents   []*raftpb.Entry
		repair bool
	)
	for {
		w, err = wal.Open(zl, walDir, start)
		if err != nil {
			return nil, fmt.Errorf("raftstore: open %s: opening the WAL at snapshot index %d%s: %w", dir, start.GetIndex(), fallback, err)
		}
		meta, st, ents, err = w.ReadAll()
		if err == nil {
			break
		}
		w.Close()
		if repair || !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("raftstore: open %s: the WAL is corrupt (not a torn tail that could be cut off): %w", dir, err)
		}
		log.Warn("raftstore: the WAL ends in a torn record (a write cut short by a crash); cutting it off, a copy of the segment is kept as .wal.broken",
			"dir", dir, "err", err)
		if !wal.Repair(zl, walDir) {
			return nil, fmt.Errorf("raftstore: open %s: the WAL ends in a torn record and repairing it failed: %w", dir, err)
		}
		repair = true
	}
	if st == nil {
		st = &raftpb.HardState{}
	}
	// ReadAll checked the records and readied the WAL for appending; the
	// entries come from a replay that does not resurrect dropped ones.
	fixed, err := replayEntries(walDir, start.GetIndex(), walSnaps)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("raftstore: open %s: the WAL is corrupt%s: %w", dir, fallback, err)
	}
	if !sameEntries(ents, fixed) {
		log.Warn("raftstore: the WAL holds entries raft had dropped (truncated by a later leader, or replaced by a received snapshot); they stay dropped",
			"dir", dir, "wal_read_entries", len(ents), "log_entries", len(fixed))
	}
	ents = fixed

	ms := raft.NewMemoryStorage()
	cs := raftpb.EnsureConfState(nil)
	if snapshot != nil {
		if err := ms.ApplySnapshot(withoutData(snapshot)); err != nil {
			w.Close()
			return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
		}
		cs = cloneConfState(snapshot.GetMetadata().GetConfState())
	}
	if err := ms.Append(ents); err != nil {
		w.Close()
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	last, _ := ms.LastIndex()
	if st.GetCommit() > last {
		w.Close()
		return nil, fmt.Errorf("raftstore: open %s: the hard state's commit index %d is past the last entry %d: entries are missing", dir, st.GetCommit(), last)
	}
	ms.SetHardState(proto.Clone(st).(*raftpb.HardState))
	first, _ := ms.FirstIndex()

	s := &Store{
		dir:  dir,
		log:  log,
		zl:   zl,
		meta: meta,
		ms:   ms,
		w:    w,
		ss:   ss,
		hs:   st,
		cs:   cs,
		si:   snapshot.GetMetadata().GetIndex(),
	}
	log.Info("raftstore: opened raft log", "dir", dir, "snapshot_index", s.si,
		"first_index", first, "last_index", last, "term", st.GetTerm(), "commit", st.GetCommit(), "repaired", repair)
	return s, nil
}

// Metadata returns the meta given to Create.
func (s *Store) Metadata() []byte { return s.meta }

// Dir returns the directory the store lives in.
func (s *Store) Dir() string { return s.dir }

// Append durably writes hs (nil or empty: unchanged), ents and, if snap is
// not empty, a snapshot received from the leader, then shows them in the
// memory view. It returns once all of it is fsynced.
//
// ents must be consecutive; they replace any entries at and after the
// first one's index (raft's truncation of a conflicting suffix), which
// must not be past the last index + 1 nor at or below the snapshot index.
// A snapshot must be newer than the one held; the log then restarts at it
// (entries given with it must follow it), and its file is written first,
// then its WAL record, then hs and ents, then the memory view is replaced
// (ApplySnapshot), and old snapshot files and WAL segments are released
// as after SaveSnapshot. The commit index written is never lower than the
// one on disk nor than snap's index.
//
// An error from validation leaves disk and memory untouched; an error from
// the disk makes the store unusable (see Store). Append is meant to be
// called from one goroutine; it may run concurrently with SaveSnapshot and
// with reads.
func (s *Store) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snapshot *raftpb.Snapshot) error {
	return s.append(hs, ents, snapshot, true)
}

// SetHardState writes hs like Append, but does not wait for the disk when
// only the commit index moved: raft needs no durability for a write that
// nothing waits on (a commit index the leader will tell again; with
// AsyncStorageWrites, a write without responses). The next synced write
// makes it durable. A term or vote change is synced all the same.
func (s *Store) SetHardState(hs *raftpb.HardState) error {
	return s.append(hs, nil, nil, false)
}

func (s *Store) append(hs *raftpb.HardState, ents []*raftpb.Entry, snapshot *raftpb.Snapshot, durable bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	haveSnap := !raft.IsEmptySnap(snapshot)
	if raft.IsEmptyHardState(hs) && len(ents) == 0 && !haveSnap {
		return nil
	}

	// Validate everything before touching the disk.
	base := s.si
	last, _ := s.ms.LastIndex()
	if haveSnap {
		idx, term := snapshot.GetMetadata().GetIndex(), snapshot.GetMetadata().GetTerm()
		if idx <= s.si {
			return fmt.Errorf("raftstore: append: snapshot at index %d is not newer than the one held (%d): %w", idx, s.si, raft.ErrSnapOutOfDate)
		}
		// raft hands storage a snapshot only when its log does not hold the
		// snapshot's entry; one that does would keep the entries after it
		// on disk (Open replays it as the store's own snapshot) while the
		// memory view dropped them.
		if t, err := s.ms.Term(idx); err == nil && t == term && idx < last {
			return fmt.Errorf("raftstore: append: snapshot at index %d term %d matches the log, which goes on to %d: raft does not replace a matching log", idx, term, last)
		}
		base, last = idx, idx
	}
	if len(ents) > 0 {
		first := ents[0].GetIndex()
		for i, e := range ents {
			if e.GetIndex() != first+uint64(i) {
				return fmt.Errorf("raftstore: append: entries are not consecutive: entry %d has index %d after %d", i, e.GetIndex(), first+uint64(i)-1)
			}
		}
		if first <= base {
			return fmt.Errorf("raftstore: append: entry %d is at or below the snapshot index %d", first, base)
		}
		if first > last+1 {
			return fmt.Errorf("raftstore: append: entry %d would leave a gap after the last index %d", first, last)
		}
		last = ents[len(ents)-1].GetIndex()
	}
	next := s.hs
	if !raft.IsEmptyHardState(hs) {
		next = proto.Clone(hs).(*raftpb.HardState)
	}
	commit := max(next.GetCommit(), s.hs.GetCommit())
	if haveSnap {
		commit = max(commit, base)
	}
	if commit > last {
		return fmt.Errorf("raftstore: append: commit index %d would be past the last index %d", commit, last)
	}
	if commit != next.GetCommit() {
		next = proto.Clone(next).(*raftpb.HardState)
		next.Commit = new(commit)
	}
	hsChanged := !proto.Equal(next, s.hs)
	if !hsChanged && len(ents) == 0 && !haveSnap {
		return nil
	}

	// Disk: snapshot file, its WAL record, then hard state and entries.
	walHS := &raftpb.HardState{} // the hard state to write with the entries; empty: none
	if hsChanged {
		walHS = next
	}
	if haveSnap {
		if err := s.writeSnapFile(snapshot); err != nil {
			return s.fail("append: writing snapshot file", err)
		}
		if err := s.w.SaveSnapshot(walSnapshot(snapshot.GetMetadata())); err != nil {
			return s.fail("append: writing snapshot record", err)
		}
		// The hard state that makes the record valid (commit >= its index)
		// goes before the entries: wal.Save writes a hard state after its
		// entries, and a crash must not leave entries after a record that
		// does not count (see replayEntries).
		if err := s.w.Save(next, nil); err != nil {
			return s.fail("append: writing the WAL", err)
		}
		walHS = &raftpb.HardState{}
	}
	if err := s.w.Save(walHS, ents); err != nil {
		return s.fail("append: writing the WAL", err)
	}
	// wal.Save syncs whenever it writes entries or a new term or vote
	// (raft.MustSync); a commit-only hard state it leaves unsynced, so
	// Append syncs it here (everything Append accepted is durable), and
	// SetHardState leaves it for the next synced write.
	if len(ents) == 0 && durable {
		if err := s.w.Sync(); err != nil {
			return s.fail("append: syncing the WAL", err)
		}
	}

	// Memory view.
	if haveSnap {
		if err := s.ms.ApplySnapshot(withoutData(snapshot)); err != nil {
			return s.fail("append: applying snapshot", err)
		}
		s.si = base
		s.cs = cloneConfState(snapshot.GetMetadata().GetConfState())
	}
	if hsChanged {
		s.hs = next
		s.ms.SetHardState(proto.Clone(next).(*raftpb.HardState))
	}
	if err := s.ms.Append(ents); err != nil {
		return s.fail("append: memory view", err)
	}
	if haveSnap {
		s.release()
	}
	return nil
}

// SaveSnapshot records a snapshot the node took of its own applied state
// at index, with conf state cs (nil: that of the previous snapshot) and
// data, which the store does not keep once written (Snapshot reads it
// back from the file). The
// snapshot file is written and fsynced, then its WAL record (with the
// commit index raised to index if it was lower), then the memory view
// takes it (CreateSnapshot) and is compacted to keep trailing entries
// before index. Last, the WAL segments older than the oldest kept
// snapshot are released and deleted, and snapshot files beyond the newest
// 3 are deleted.
//
// index must be above the current snapshot's (else the error wraps
// raft.ErrSnapOutOfDate and nothing changes) and at most the last index.
// SaveSnapshot may be called from another goroutine than Append: the two
// are serialized by the store's mutex, so one waits for the other's disk
// writes.
func (s *Store) SaveSnapshot(index uint64, cs *raftpb.ConfState, data []byte, trailing uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if index <= s.si {
		return fmt.Errorf("raftstore: save snapshot at index %d: the store holds one at %d: %w", index, s.si, raft.ErrSnapOutOfDate)
	}
	last, _ := s.ms.LastIndex()
	if index > last {
		return fmt.Errorf("raftstore: save snapshot at index %d: past the last index %d", index, last)
	}
	term, err := s.ms.Term(index)
	if err != nil {
		return fmt.Errorf("raftstore: save snapshot at index %d: %w", index, err)
	}
	if cs == nil {
		cs = s.cs
	}
	cs = cloneConfState(cs)
	snapshot := &raftpb.Snapshot{
		Data:     data,
		Metadata: &raftpb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: cs},
	}

	if err := s.writeSnapFile(snapshot); err != nil {
		return s.fail("save snapshot: writing snapshot file", err)
	}
	next := s.hs
	if index > s.hs.GetCommit() {
		// The node applied index, so it is committed; a snapshot record
		// above the WAL's commit index would not count on Open.
		next = proto.Clone(s.hs).(*raftpb.HardState)
		next.Commit = new(index)
		if err := s.w.Save(next, nil); err != nil { // synced by SaveSnapshot below
			return s.fail("save snapshot: writing hard state", err)
		}
	}
	if err := s.w.SaveSnapshot(walSnapshot(snapshot.GetMetadata())); err != nil {
		return s.fail("save snapshot: writing snapshot record", err)
	}

	if _, err := s.ms.CreateSnapshot(index, cs, nil); err != nil {
		return s.fail("save snapshot: memory view", err)
	}
	if next != s.hs {
		s.hs = next
		s.ms.SetHardState(proto.Clone(next).(*raftpb.HardState))
	}
	s.si = index
	s.cs = cs
	if index > trailing {
		first, _ := s.ms.FirstIndex()
		if c := index - trailing; c >= first {
			if err := s.ms.Compact(c); err != nil {
				return s.fail("save snapshot: compacting memory view", err)
			}
		}
	}
	s.release()
	return nil
}

// Close syncs and closes the WAL. The memory view stays readable; Append
// and SaveSnapshot return ErrClosed. Closing twice returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.err, ErrClosed) {
		return nil
	}
	s.err = ErrClosed
	if err := s.w.Close(); err != nil {
		return fmt.Errorf("raftstore: close %s: %w", s.dir, err)
	}
	return nil
}

// InitialState implements raft.Storage: the hard state on disk and the conf
// state of the newest snapshot.
func (s *Store) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	return s.ms.InitialState()
}

// Entries implements raft.Storage: the entries in [lo, hi), at most maxSize
// bytes of them (at least one).
func (s *Store) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	return s.ms.Entries(lo, hi, maxSize)
}

// Term implements raft.Storage: the term of entry i, for i in
// [FirstIndex()-1, LastIndex()].
func (s *Store) Term(i uint64) (uint64, error) { return s.ms.Term(i) }

// LastIndex implements raft.Storage: the index of the last entry.
func (s *Store) LastIndex() (uint64, error) { return s.ms.LastIndex() }

// FirstIndex implements raft.Storage: the index of the first entry held
// (older ones are in the snapshot).
func (s *Store) FirstIndex() (uint64, error) { return s.ms.FirstIndex() }

// Snapshot implements raft.Storage: the newest snapshot, its data read from
// its file (the memory view keeps only its metadata). Each call reads the
// file into a new buffer; raft calls it only to send the snapshot to a
// follower whose log it cannot catch up with entries, and the node when it
// starts (to read its members, then to restore its state). A file that cannot be read (damaged, or removed because
// three newer snapshots were saved during the read) is logged and reported
// as raft.ErrSnapshotTemporarilyUnavailable, unwrapped: raft compares with
// == and panics on any other error; it tries again later.
func (s *Store) Snapshot() (*raftpb.Snapshot, error) {
	md, err := s.ms.Snapshot()
	if err != nil || md.GetMetadata().GetIndex() == 0 {
		return md, err
	}
	snapshot, err := readSnap(filepath.Join(s.dir, snapDirName), md.GetMetadata())
	if err != nil {
		s.log.Error("raftstore: reading the newest snapshot file", "dir", s.dir, "index", md.GetMetadata().GetIndex(), "err", err)
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	snapshot.Metadata = md.GetMetadata() // the memory view's, with the optional fields it sets
	return snapshot, nil
}

// withoutData returns snapshot's metadata in a snapshot without data: what
// the memory view keeps.
func withoutData(snapshot *raftpb.Snapshot) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: snapshot.GetMetadata()}
}

// fail records the first disk failure; the store is unusable after it.
func (s *Store) fail(op string, err error) error {
	s.err = fmt.Errorf("raftstore: %s %s: %w (the store is unusable until reopened)", s.dir, op, err)
	s.log.Error("raftstore: write failed", "dir", s.dir, "op", op, "err", err)
	return s.err
}

// writeSnapFile writes and fsyncs a snapshot file, then fsyncs the
// snapshot directory so the new name is durable too.
func (s *Store) writeSnapFile(snapshot *raftpb.Snapshot) error {
	dir := filepath.Join(s.dir, snapDirName)
	if err := writeSnap(dir, snapshot); err != nil {
		return err
	}
	return syncDir(dir)
}

// walSnapshot is the WAL record naming a snapshot.
func walSnapshot(md *raftpb.SnapshotMetadata) *walpb.Snapshot {
	return &walpb.Snapshot{
		Index:     new(md.GetIndex()),
		Term:      new(md.GetTerm()),
		ConfState: cloneConfState(md.GetConfState()),
	}
}

// cloneConfState returns a copy of cs (nil: an empty one) with its
// optional fields set, as raft's MemoryStorage returns them.
func cloneConfState(cs *raftpb.ConfState) *raftpb.ConfState {
	if cs == nil {
		return raftpb.EnsureConfState(nil)
	}
	return raftpb.EnsureConfState(proto.Clone(cs).(*raftpb.ConfState))
}

// sameEntries reports whether a and b hold the same entries.
func sameEntries(a, b []*raftpb.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y *raftpb.Entry) bool { return proto.Equal(x, y) })
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := fileutil.OpenDir(dir)
	if err != nil {
		return err
	}
	err = fileutil.Fsync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
