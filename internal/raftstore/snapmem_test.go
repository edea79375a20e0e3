package raftstore

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
)

// The memory view keeps a snapshot's metadata, never its data, whichever
// way the snapshot came (saved, received from the leader, loaded by Open);
// Snapshot still returns the data, read from the file.
func TestSnapshotDataOnlyOnDisk(t *testing.T) {
	s := mustCreate(t, t.TempDir(), "m")
	defer func() { s.Close() }()
	check := func(how string, index, term uint64, data string) {
		t.Helper()
		held, err := s.ms.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if held.Data != nil || held.GetMetadata().GetIndex() != index {
			t.Fatalf("%s: the memory view holds a snapshot at %d with %d bytes of data, want %d without data", how, held.GetMetadata().GetIndex(), len(held.Data), index)
		}
		got, err := s.Snapshot()
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", how, err)
		}
		if got.GetMetadata().GetIndex() != index || got.GetMetadata().GetTerm() != term || string(got.GetData()) != data {
			t.Fatalf("%s: Snapshot at %d/%d %q, want %d/%d %q", how, got.GetMetadata().GetIndex(), got.GetMetadata().GetTerm(), got.GetData(), index, term, data)
		}
	}
	mustAppend(t, s, hardState(1, 1, 5), ents(1, 5, 1), nil)
	if err := s.SaveSnapshot(4, confState(1), []byte("state@4"), 0); err != nil {
		t.Fatal(err)
	}
	check("saved", 4, 1, "state@4")
	mustAppend(t, s, hardState(2, 0, 9), nil, snapshotAt(9, 2, confState(1, 2), "leader@9"))
	check("received", 9, 2, "leader@9")
	s = reopen(t, s)
	check("opened", 9, 2, "leader@9")
}

// A snapshot file that cannot be read makes Snapshot return
// raft.ErrSnapshotTemporarilyUnavailable itself (raft compares with ==
// and panics on any other error), and says why in the log.
func TestSnapshotFileUnreadable(t *testing.T) {
	for _, how := range []string{"flip", "truncate", "removed"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			log, tl := newTestLog(t)
			s, err := Create(dir, []byte("m"), log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			mustAppend(t, s, hardState(1, 1, 3), ents(1, 3, 1), nil)
			if err := s.SaveSnapshot(3, confState(1), bytes.Repeat([]byte("x"), 4096), 0); err != nil {
				t.Fatal(err)
			}
			if how == "removed" {
				if err := os.Remove(snapPath(dir, 3)); err != nil {
					t.Fatal(err)
				}
			} else {
				corruptFile(t, snapPath(dir, 3), how)
			}
			got, err := s.Snapshot()
			if err != raft.ErrSnapshotTemporarilyUnavailable || got != nil {
				t.Fatalf("Snapshot: %v, %v; want nil, raft.ErrSnapshotTemporarilyUnavailable", got, err)
			}
			if !strings.Contains(tl.String(), "reading the newest snapshot file") {
				t.Fatalf("log does not say why:\n%s", tl.String())
			}
		})
	}
}

// readSnap refuses a file whose metadata names another snapshot than its
// name (a file copied over another's name).
func TestReadSnapChecksMetadata(t *testing.T) {
	dir := t.TempDir()
	if err := writeSnap(dir, snapshotAt(7, 2, confState(1), "seven")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "0000000000000002-0000000000000007.snap"), filepath.Join(dir, "0000000000000002-0000000000000008.snap")); err != nil {
		t.Fatal(err)
	}
	if _, err := readSnap(dir, snapshotAt(8, 2, nil, "").GetMetadata()); err == nil || !strings.Contains(err.Error(), "holds the snapshot at index 7 term 2") {
		t.Fatalf("readSnap of a renamed file: %v", err)
	}
}
