package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The data dir's layout: formatFile names the data format; raftDir holds
// the raft log (internal/raftstore: etcd's WAL and snapshot files); lockFile
// is held by the running node.
const (
	raftDir    = "raft"
	lockFile   = "LOCK"
	formatFile = "FORMAT"
	// dataFormat is the format this fence writes and reads: the raft log of
	// go.etcd.io/raft (etcd's WAL and snapshotter), entries of fsm format 2
	// behind a proposal id, snapshots of fsm format 3 behind the member list.
	dataFormat = "fence data format 3\n"
)

// earlierFormats says what each earlier format was and what to do with it.
var earlierFormats = map[string]string{
	"fence data format 2": "the hashicorp/raft engine of fence before the etcd-io/raft one",
}

// formatOneLayout names what a fence of data format 1 left in a data dir
// (it wrote no format file).
var formatOneLayout = []string{"wal", "raft.db", "raft.db.migrated", "snapshots"}

// upgradeAdvice is the way forward from an earlier data format.
const upgradeAdvice = "start this fence with an empty --data-dir (the old cluster's leases and locks are not carried over: " +
	"let their holders finish first), or keep running the earlier fence on it; see README, Upgrading"

// checkFormat makes sure dataDir (locked by the caller) holds data of this
// fence's format: it writes the format file into a new data dir (and says
// so: created), and refuses, with what to do, a data dir written in another
// format. Nothing in a data dir is reinterpreted or converted silently.
func checkFormat(dataDir string) (created bool, err error) {
	fresh, err := inspectFormat(dataDir)
	if err != nil || !fresh {
		return false, err
	}
	path := filepath.Join(dataDir, formatFile)
	if err := os.WriteFile(path, []byte(dataFormat), 0o640); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return false, err
	}
	return true, syncDir(dataDir)
}

// CheckDataDir refuses, as New would and without changing anything, a data
// dir that another fence process holds or that was written in another
// format; a new (or missing) data dir passes. The server asks before it
// puts anything of its own into the dir.
func CheckDataDir(dataDir string) error {
	if _, err := os.Stat(filepath.Join(dataDir, lockFile)); err == nil {
		f, err := lockDataDir(dataDir)
		if err != nil {
			return err
		}
		f.Close()
	}
	_, err := inspectFormat(dataDir)
	return err
}

// inspectFormat reports whether dataDir is new (no format file, nothing of
// an earlier format) or refuses it with what to do; neither means it holds
// this fence's format.
func inspectFormat(dataDir string) (fresh bool, err error) {
	path := filepath.Join(dataDir, formatFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && string(b) == dataFormat:
		return false, nil
	case err == nil:
		got := strings.TrimSpace(string(b))
		if what, ok := earlierFormats[got]; ok {
			return false, fmt.Errorf("data dir %s holds %q, written by %s; this fence (%q) cannot read it: %s",
				dataDir, got, what, strings.TrimSpace(dataFormat), upgradeAdvice)
		}
		return false, fmt.Errorf("data dir %s holds %q, not %q: it was written by another fence version; use that version, or start this one with an empty --data-dir", dataDir, got, strings.TrimSpace(dataFormat))
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	for _, name := range append(formatOneLayout, raftDir) {
		if _, err := os.Stat(filepath.Join(dataDir, name)); err == nil {
			return false, fmt.Errorf("data dir %s was written by an earlier fence (data format 1: it has %s but no %s file); this fence cannot read its log or snapshots: %s",
				dataDir, name, formatFile, upgradeAdvice)
		}
	}
	return true, nil
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
