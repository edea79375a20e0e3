package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/migrate"
	bolt "go.etcd.io/bbolt"
)

// The data dir's layout: the raft log and raft's own small state (term,
// vote) in walDir (hashicorp/raft-wal: segment files appended and fsynced
// once per write, plus its index), snapshots in snapshots/, and lockFile
// held by the running server. legacyLog is where fence kept the raft log
// before raft-wal (raft-boltdb, two fsyncs per write).
const (
	walDir    = "wal"
	lockFile  = "LOCK"
	legacyLog = "raft.db"
)

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

// openLogStore opens the raft log of dataDir (locked by the caller),
// migrating a legacy raft.db first.
func openLogStore(dataDir string, hl hclog.Logger, log *slog.Logger) (*wal.WAL, error) {
	dir := filepath.Join(dataDir, walDir)
	if err := migrateLegacyLog(dataDir, log); err != nil {
		return nil, fmt.Errorf("migrate %s to %s: %w", filepath.Join(dataDir, legacyLog), dir, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("raft log dir: %w", err)
	}
	w, err := wal.Open(dir, wal.WithLogger(hl))
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", dir, err)
	}
	return w, nil
}

// migrateLegacyLog copies a legacy raft.db (log entries, term and vote)
// into a new wal dir and renames raft.db to raft.db.migrated (kept, not
// deleted: an operator can roll back to the previous fence with it). The
// copy is built beside the data and renamed into place, so a crash at any
// point leaves either the old layout (the copy starts over) or the new one.
func migrateLegacyLog(dataDir string, log *slog.Logger) error {
	old, dir := filepath.Join(dataDir, legacyLog), filepath.Join(dataDir, walDir)
	if _, err := os.Stat(old); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		// Copied and renamed before a crash; only the old file's rename is left.
		return retire(old, dataDir)
	}
	tmp := dir + ".migrating"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return err
	}
	start := time.Now()
	entries, err := copyLegacyLog(old, tmp)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if err := syncDir(dataDir); err != nil {
		return err
	}
	log.Info("migrated the raft log from raft-boltdb to raft-wal", "entries", entries,
		"from", old, "to", dir, "took", time.Since(start), "kept", old+".migrated")
	return retire(old, dataDir)
}

// copyLegacyLog copies the log entries and raft's stable keys of a
// raft-boltdb file into a raft-wal in dir and returns the entries copied.
func copyLegacyLog(path, dir string) (entries uint64, err error) {
	src, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bolt.Options{Timeout: time.Second}})
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer src.Close()
	dst, err := wal.Open(dir)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}()
	first, err := src.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, err
	}
	if last > 0 {
		if err := migrate.CopyLogs(context.Background(), dst, src, 1<<20, nil); err != nil {
			return 0, err
		}
		entries = last - first + 1
	}
	// The keys hashicorp/raft keeps (a node that never voted has no vote).
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		v, err := src.GetUint64([]byte(k))
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return 0, fmt.Errorf("read %s: %w", k, err)
		}
		if err := dst.SetUint64([]byte(k), v); err != nil {
			return 0, err
		}
	}
	v, err := src.Get([]byte("LastVoteCand"))
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return 0, fmt.Errorf("read LastVoteCand: %w", err)
	}
	if err == nil {
		if err := dst.Set([]byte("LastVoteCand"), v); err != nil {
			return 0, err
		}
	}
	return entries, nil
}

// retire renames the migrated legacy log out of the way, durably.
func retire(old, dataDir string) error {
	if err := os.Rename(old, old+".migrated"); err != nil {
		return err
	}
	return syncDir(dataDir)
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
