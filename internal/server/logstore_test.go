package server

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/clock/clocktest"
)

// testdata/legacy-raftdb.tar.gz is a single-node data dir written by fence
// before raft-wal (raft.db, raft-boltdb): 20 lock cycles (tokens 1–20), then
// fix/a, fix/b, fix/c held with tokens 21–23 by 1-hour leases, then three
// snapshots, then fix/d taken with token 24, which is only in the log.
func legacyDataDir(t *testing.T) string {
	t.Helper()
	f, err := os.Open("testdata/legacy-raftdb.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		} else if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir) {
			t.Fatalf("bad path in archive: %s", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o750); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkLegacyState asserts the fixture's state survived and the token
// counter continues above the highest one ever granted.
func checkLegacyState(t *testing.T, n *testNode) {
	t.Helper()
	for i, name := range []string{"fix/a", "fix/b", "fix/c", "fix/d"} {
		if l := n.getLock(name); l == nil || l.Token != uint64(21+i) {
			t.Fatalf("%s after migration: %v, want token %d", name, l, 21+i)
		}
	}
	r, err := n.acquire(n.lease(time.Hour, "new"), "fresh", false)
	if err != nil || r.Token != 25 {
		t.Fatalf("first grant after migration: %v %v, want token 25", r, err)
	}
}

func TestLegacyRaftDBIsMigrated(t *testing.T) {
	dir := legacyDataDir(t)
	n := &testNode{t: t, clock: clocktest.New(), dir: dir}
	n.start()
	t.Cleanup(n.stop)
	checkLegacyState(t, n)
	if exists(filepath.Join(dir, legacyLog)) || !exists(filepath.Join(dir, legacyLog+".migrated")) || !exists(filepath.Join(dir, walDir)) {
		t.Fatal("after migration the data dir should hold wal/ and raft.db.migrated, not raft.db")
	}
	// A restart opens the migrated log as it is.
	n.restart()
	if l := n.getLock("fresh"); l == nil || l.Token != 25 {
		t.Fatalf("fresh after restart: %v", l)
	}
}

// A crash at any point of the migration leaves a data dir the next start
// migrates or completes.
func TestInterruptedMigrationCompletes(t *testing.T) {
	crashes := map[string]func(t *testing.T, dir string){
		"during the copy": func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, walDir+".migrating", "partial"), 0o750); err != nil {
				t.Fatal(err)
			}
		},
		"before raft.db was renamed": func(t *testing.T, dir string) {
			if err := migrateLegacyLog(dir, testLogger()); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, legacyLog+".migrated"), filepath.Join(dir, legacyLog)); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, crash := range crashes {
		t.Run(name, func(t *testing.T) {
			dir := legacyDataDir(t)
			crash(t, dir)
			n := &testNode{t: t, clock: clocktest.New(), dir: dir}
			n.start()
			t.Cleanup(n.stop)
			checkLegacyState(t, n)
			if exists(filepath.Join(dir, legacyLog)) || exists(filepath.Join(dir, walDir+".migrating")) {
				t.Fatal("raft.db and the partial copy should be gone")
			}
		})
	}
}

func TestDataDirInUseIsRefused(t *testing.T) {
	n := startNode(t, nil)
	cfg := DefaultConfig()
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = n.dir, "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Logger = testLogger()
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), "in use by another fence process") {
		t.Fatalf("second server on the same data dir: %v", err)
	}
}
