package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
)

// snapFile is a parsed snapshot file name <term>-<index>.snap.
type snapFile struct {
	name        string
	term, index uint64
}

// snapFiles lists the snapshot files of dir, newest first (etcd's order:
// by name, which sorts by term, then index).
func snapFiles(dir string) ([]snapFile, error) {
	names, err := fileutil.ReadDir(dir, fileutil.WithExt(".snap"))
	if err != nil {
		return nil, err
	}
	var out []snapFile
	for _, n := range names {
		var f snapFile
		if _, err := fmt.Sscanf(n, "%016x-%016x.snap", &f.term, &f.index); err != nil {
			continue
		}
		f.name = n
		out = append(out, f)
	}
	slices.Reverse(out)
	return out, nil
}

// release deletes what no snapshot the store keeps needs any more: the
// snapshot files beyond the newest keepSnapshots, and the WAL segments
// before the one holding the oldest kept snapshot's index (their locks are
// released first with wal.ReleaseLockTo; a segment still locked is left).
// Keeping the WAL back to the oldest kept snapshot lets Open fall back to
// any of them if a newer file turns out unreadable. Failures are logged,
// not returned: nothing needed is lost, and the next snapshot retries.
// Called with s.mu held.
func (s *Store) release() {
	snapDir := filepath.Join(s.dir, snapDirName)
	walDir := filepath.Join(s.dir, walDirName)
	snaps, err := snapFiles(snapDir)
	if err != nil {
		s.log.Warn("raftstore: listing snapshot files", "dir", snapDir, "err", err)
		return
	}
	removed := 0
	for _, f := range snaps[min(len(snaps), keepSnapshots):] {
		if err := os.Remove(filepath.Join(snapDir, f.name)); err != nil {
			s.log.Warn("raftstore: removing an old snapshot file", "file", f.name, "err", err)
			continue
		}
		removed++
	}
	if removed > 0 {
		if err := syncDir(snapDir); err != nil {
			s.log.Warn("raftstore: syncing the snapshot directory", "dir", snapDir, "err", err)
		}
	}

	// The oldest kept snapshot at or below the current one (a file above
	// it is one a crash left without a valid WAL record).
	keep := s.si
	for _, f := range snaps[:min(len(snaps), keepSnapshots)] {
		if f.index <= s.si {
			keep = min(keep, f.index)
		}
	}
	if err := s.w.ReleaseLockTo(keep); err != nil {
		s.log.Warn("raftstore: releasing WAL segments", "dir", walDir, "err", err)
		return
	}
	names, err := walNames(walDir)
	if err != nil {
		s.log.Warn("raftstore: listing WAL segments", "dir", walDir, "err", err)
		return
	}
	// wal.Open at index keep starts at the last segment whose first index
	// is at or below keep; the ones before it are not read.
	from := -1
	for i := len(names) - 1; i >= 0; i-- {
		if names[i].index <= keep {
			from = i
			break
		}
	}
	removed = 0
	for _, n := range names[:max(from, 0)] {
		p := filepath.Join(walDir, n.name)
		l, err := fileutil.TryLockFile(p, os.O_WRONLY, fileutil.PrivateFileMode)
		if err != nil {
			break // still held by the WAL: so are the ones after it
		}
		err = os.Remove(p)
		l.Close()
		if err != nil {
			s.log.Warn("raftstore: removing an old WAL segment", "file", n.name, "err", err)
			break
		}
		removed++
	}
	if removed > 0 {
		s.log.Debug("raftstore: removed old WAL segments", "dir", walDir, "count", removed, "kept_from_index", keep)
		if err := syncDir(walDir); err != nil {
			s.log.Warn("raftstore: syncing the WAL directory", "dir", walDir, "err", err)
		}
	}
}
