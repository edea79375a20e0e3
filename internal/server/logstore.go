package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// The data dir's layout: formatFile names the data format; the raft log and
// raft's own small state (term, vote) in walDir (hashicorp/raft-wal: segment
// files appended and fsynced once per write, plus its index), snapshots in
// snapshots/, and lockFile held by the running server.
const (
	walDir     = "wal"
	lockFile   = "LOCK"
	formatFile = "FORMAT"
	// dataFormat is the format this fence writes and reads: log entries of
	// fsm format 2 and snapshots of fsm format 3 (call numbers). A data dir
	// without formatFile that holds anything was written by an earlier fence
	// (format 1) and is refused: its entries would mean something else now.
	dataFormat = "fence data format 2\n"
)

// oldLayout names what an earlier fence left in a data dir.
var oldLayout = []string{walDir, "raft.db", "raft.db.migrated", "snapshots"}

// checkFormat makes sure dataDir (locked by the caller) holds data of this
// fence's format: it writes the format file into a new data dir, and
// refuses, with what to do, a data dir written in another format. Nothing
// in a data dir is reinterpreted or converted silently.
func checkFormat(dataDir string) error {
	path := filepath.Join(dataDir, formatFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && string(b) == dataFormat:
		return nil
	case err == nil:
		return fmt.Errorf("data dir %s holds %q, not %q: it was written by another fence version; use that version, or start this one with an empty --data-dir", dataDir, strings.TrimSpace(string(b)), strings.TrimSpace(dataFormat))
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, name := range oldLayout {
		if _, err := os.Stat(filepath.Join(dataDir, name)); err == nil {
			return fmt.Errorf("data dir %s was written by an earlier fence (data format 1: it has %s but no %s file); this fence cannot read its log or snapshots. "+
				"Start this fence with an empty --data-dir (the old cluster's leases and locks are not carried over: let their holders finish first), "+
				"or keep running the earlier fence on it; see README, Upgrading", dataDir, name, formatFile)
		}
	}
	if err := os.WriteFile(path, []byte(dataFormat), 0o640); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	return syncDir(dataDir)
}

// lockDataDir takes an exclusive lock on the data dir, so that a second
// server pointed at it fails at once instead of corrupting it. The lock is
// released when the returned file is closed or the process ends.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another fence process", dir)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	return f, nil
}

// openLogStore opens the raft log of dataDir (locked by the caller and of
// this fence's format).
func openLogStore(dataDir string, hl hclog.Logger) (*wal.WAL, error) {
	dir := filepath.Join(dataDir, walDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("raft log dir: %w", err)
	}
	w, err := wal.Open(dir, wal.WithLogger(hl))
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", dir, err)
	}
	return w, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var _ interface {
	raft.LogStore
	raft.StableStore
	raft.MonotonicLogStore
} = (*wal.WAL)(nil)
