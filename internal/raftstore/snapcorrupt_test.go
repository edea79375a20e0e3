package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// snapshotStore writes entries 1..60 with snapshots at 20, 40 and 50, and
// closes the store.
func snapshotStore(t *testing.T, dir string) {
	t.Helper()
	s := mustCreate(t, dir, "snaps")
	for i := uint64(1); i <= 60; i++ {
		mustAppend(t, s, hardState(1, 1, i), ents(i, i, 1), nil)
		if i == 20 || i == 40 || i == 50 {
			if err := s.SaveSnapshot(i, confState(1, 2, 3), []byte("state@"+itoa(i)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func snapPath(dir string, index uint64) string {
	return filepath.Join(dir, "snap", fmt.Sprintf("%016x-%016x.snap", 1, index))
}

func corruptFile(t *testing.T, path string, how string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch how {
	case "flip":
		b[len(b)/2] ^= 0x10
	case "truncate":
		b = b[:len(b)/3]
	case "empty":
		b = nil
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func term1(uint64) uint64 { return 1 }

// A damaged newest snapshot file: Open falls back to the next older one
// and reads the log from there.
func TestSnapshotCorruptFallsBack(t *testing.T) {
	for _, how := range []string{"flip", "truncate", "empty"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			snapshotStore(t, dir)
			corruptFile(t, snapPath(dir, 50), how)
			log, tl := newTestLog(t)
			s, err := Open(dir, log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			v := wantLog(t, s, 41, 60, term1)
			if v.snapIndex != 40 || v.snapData != "state@40" {
				t.Fatalf("snapshot %d %q, want the one at 40", v.snapIndex, v.snapData)
			}
			wantHardState(t, v.hs, 1, 1, 60)
			if !strings.Contains(tl.String(), "no readable snapshot file") {
				t.Fatalf("no warning about the fallback in the log:\n%s", tl.String())
			}
			if _, err := os.Stat(snapPath(dir, 50) + ".broken"); err != nil {
				t.Fatalf("the damaged file was not set aside: %v", err)
			}
			// It goes on, and a new snapshot replaces the damaged one.
			mustAppend(t, s, hardState(1, 1, 61), ents(61, 61, 1), nil)
			if err := s.SaveSnapshot(61, nil, []byte("state@61"), 0); err != nil {
				t.Fatal(err)
			}
			s = reopen(t, s)
			v = wantLog(t, s, 62, 61, term1)
			if v.snapIndex != 61 || v.snapData != "state@61" {
				t.Fatalf("snapshot %d %q", v.snapIndex, v.snapData)
			}
		})
	}
}

// Every snapshot file damaged: with the whole WAL still there (one
// segment), Open starts from the beginning of the log; with the old
// segments deleted, it refuses with an error naming the problem.
func TestSnapshotAllCorrupt(t *testing.T) {
	t.Run("whole WAL", func(t *testing.T) {
		dir := t.TempDir()
		snapshotStore(t, dir)
		for _, i := range []uint64{20, 40, 50} {
			corruptFile(t, snapPath(dir, i), "flip")
		}
		s := mustOpen(t, dir)
		defer s.Close()
		v := wantLog(t, s, 1, 60, term1)
		if v.snapIndex != 0 {
			t.Fatalf("snapshot %d", v.snapIndex)
		}
		wantHardState(t, v.hs, 1, 1, 60)
	})
	t.Run("old segments deleted", func(t *testing.T) {
		setSegmentSize(t, 512)
		dir := t.TempDir()
		snapshotStore(t, dir)
		names, err := walNames(filepath.Join(dir, "wal"))
		if err != nil {
			t.Fatal(err)
		}
		if names[0].index == 0 {
			t.Fatalf("the first segment was kept: %v", names)
		}
		for _, i := range []uint64{20, 40, 50} {
			corruptFile(t, snapPath(dir, i), "flip")
		}
		log, _ := newTestLog(t)
		s, err := Open(dir, log)
		if err == nil {
			last, _ := s.LastIndex()
			s.Close()
			t.Fatalf("Open succeeded with log ..%d and no snapshot", last)
		}
		if !strings.Contains(err.Error(), "no readable file") {
			t.Fatalf("unclear error: %v", err)
		}
		t.Log(err)
	})
}
