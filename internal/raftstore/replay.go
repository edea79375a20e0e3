package raftstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// replayEntries reads every record of the WAL in walDir with etcd's own
// decoder and returns the log's entries after index start, as the store's
// memory view held them when they were written.
//
// wal.ReadAll returns the same entries except in two cases, where it
// resurrects entries raft had already dropped (etcd issues 22442/22443):
//   - An entry that overwrote a suffix (a deposed leader's uncommitted
//     tail) at an index at or below the snapshot the WAL is opened at: ReadAll
//     skips that entry and with it the truncation it implies, so the
//     replaced entries above the snapshot come back.
//   - A snapshot received from the leader replaces the whole log, but the
//     WAL only records the snapshot; a stale tail above its index written
//     before the record comes back if no entry was written after it.
//
// The replay applies every entry with raft's truncation (an entry at index
// k drops all entries from k on, whatever the snapshot) and treats a
// snapshot record whose (index, term) is not in the log at that point as
// the log restarting there (a received snapshot; the store's own snapshots
// are always of an entry it holds). Only the records in valid count: a
// record above the WAL's last commit index is one whose Append a crash cut
// short before its hard state was written (Append writes the record, then
// a hard state committing it, then the entries after it), so the log
// stayed as it was.
func replayEntries(walDir string, start uint64, valid []*walpb.Snapshot) ([]*raftpb.Entry, error) {
	names, err := walNames(walDir)
	if err != nil {
		return nil, err
	}
	var (
		files   []*os.File
		readers []fileutil.FileReader
	)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var prevSeq uint64
	for i, n := range names {
		if i > 0 && n.seq != prevSeq+1 {
			return nil, fmt.Errorf("WAL segments are missing: %s follows sequence %d", n.name, prevSeq)
		}
		prevSeq = n.seq
		f, err := os.Open(filepath.Join(walDir, n.name))
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		readers = append(readers, fileutil.NewFileReader(f))
	}

	var r replay
	dec := wal.NewDecoder(readers...)
	rec := &walpb.Record{}
	for err = dec.Decode(rec); err == nil; err = dec.Decode(rec) {
		switch rec.GetType() {
		case wal.EntryType:
			r.entry(wal.MustUnmarshalEntry(rec.GetData()))
		case wal.SnapshotType:
			var s walpb.Snapshot
			if err := proto.Unmarshal(rec.GetData(), &s); err != nil {
				return nil, fmt.Errorf("WAL snapshot record: %w", err)
			}
			if slices.ContainsFunc(valid, func(v *walpb.Snapshot) bool {
				return v.GetIndex() == s.GetIndex() && v.GetTerm() == s.GetTerm()
			}) {
				r.snapshot(s.GetIndex(), s.GetTerm())
			}
		case wal.CrcType:
			if crc := dec.LastCRC(); crc != 0 && rec.Validate(crc) != nil {
				return nil, wal.ErrCRCMismatch
			}
			dec.UpdateCRC(rec.GetCrc())
		}
	}
	if !errors.Is(err, io.EOF) {
		return nil, err
	}

	last := r.base + uint64(len(r.ents))
	switch {
	case start >= last:
		return nil, nil
	case start < r.base:
		return nil, fmt.Errorf("WAL is missing entries %d..%d after the snapshot at %d", start+1, r.base, start)
	}
	return r.ents[start-r.base:], nil
}

// replay is the log as the WAL's records build it: ents[i] has index
// base+1+i; baseTerm is the term at base when known.
type replay struct {
	base      uint64
	baseTerm  uint64
	baseKnown bool
	ents      []*raftpb.Entry
	started   bool
}

func (r *replay) init() {
	if !r.started {
		r.started, r.baseKnown = true, true // an empty log: index 0, term 0
	}
}

// entry applies an entry write: raft's append, truncating from its index.
func (r *replay) entry(e *raftpb.Entry) {
	r.init()
	k := e.GetIndex()
	last := r.base + uint64(len(r.ents))
	if k <= r.base || k > last+1 {
		// Below what the replay holds (an overwrite reaching below the
		// segments that are left) or past its end (the first entry of a
		// WAL whose older segments were deleted): the log known from here
		// on starts at k.
		r.base, r.baseKnown, r.ents = k-1, false, nil
	}
	r.ents = append(r.ents[:k-r.base-1], e)
}

// snapshot applies a snapshot record at (index, term): a no-op if the log
// holds that entry (the store's own snapshot), else the log restarts at the
// snapshot (one received from the leader). A record below what the replay
// holds is an older snapshot of entries in deleted segments.
func (r *replay) snapshot(index, term uint64) {
	r.init()
	last := r.base + uint64(len(r.ents))
	switch {
	case index > last:
	case index > r.base:
		if r.ents[index-r.base-1].GetTerm() == term {
			return
		}
	case index == r.base && r.baseKnown:
		if r.baseTerm == term {
			return
		}
	default:
		return
	}
	r.base, r.baseTerm, r.baseKnown, r.ents = index, term, true, nil
}

// walName is a parsed WAL segment name <seq>-<index>.wal.
type walName struct {
	name       string
	seq, index uint64
}

// walNames lists the WAL segments of dir in order.
func walNames(dir string) ([]walName, error) {
	names, err := fileutil.ReadDir(dir, fileutil.WithExt(".wal"))
	if err != nil {
		return nil, err
	}
	var out []walName
	for _, n := range names {
		var w walName
		if _, err := fmt.Sscanf(n, "%016x-%016x.wal", &w.seq, &w.index); err != nil {
			continue
		}
		w.name = n
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil, wal.ErrFileNotFound
	}
	return out, nil
}
