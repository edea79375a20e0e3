package raftstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// tornSnapStore writes entries 1..60 with snapshots at 20 and 40 (small
// data) and at 50 (data of n bytes), closes the store and returns the
// size of each piece writeSnap writes for the one at 50, in order: frame,
// head, data, tail.
func tornSnapStore(t *testing.T, dir string, n int) (pieces []int) {
	t.Helper()
	s := mustCreate(t, dir, "torn")
	big := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
	for i := uint64(1); i <= 60; i++ {
		mustAppend(t, s, hardState(1, 1, i), ents(i, i, 1), nil)
		data := []byte("state@" + itoa(i))
		if i == 50 {
			data = big
		}
		if i == 20 || i == 40 || i == 50 {
			if err := s.SaveSnapshot(i, confState(1, 2, 3), data, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	head := protowire.SizeTag(1) + protowire.SizeVarint(uint64(n))
	b, err := os.ReadFile(snapPath(dir, 50))
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, big) // the data starts after the frame and head
	if at < head {
		t.Fatalf("data not found in the snapshot file")
	}
	return []int{at - head, head, n, len(b) - at - n}
}

// TestSnapshotTornAtEveryOffset cuts the newest snapshot file (recorded in
// the WAL) at every offset a crash or a lost write could leave it at —
// every byte of a small file, and around each piece writeSnap writes for
// a large one — and reopens the store each time: it falls back to the
// snapshot at 40 with the log from 41, sets the cut file aside as
// .broken, and then takes and reloads a new snapshot, as with a file
// etcd's Snapshotter wrote.
func TestSnapshotTornAtEveryOffset(t *testing.T) {
	for _, size := range []int{5, 200 << 10} {
		t.Run(fmt.Sprintf("data %d bytes", size), func(t *testing.T) {
			tmpl := filepath.Join(t.TempDir(), "tmpl")
			pieces := tornSnapStore(t, tmpl, size)
			whole, err := os.ReadFile(snapPath(tmpl, 50))
			if err != nil {
				t.Fatal(err)
			}
			var cuts []int
			if len(whole) < 4096 {
				for i := range len(whole) {
					cuts = append(cuts, i)
				}
			} else {
				at := 0
				for _, p := range pieces {
					for _, c := range []int{at - 1, at, at + 1, at + p/2} {
						if c >= 0 && c < len(whole) {
							cuts = append(cuts, c)
						}
					}
					at += p
				}
				cuts = append(cuts, len(whole)-2, len(whole)-1)
			}
			for _, cut := range cuts {
				dir := filepath.Join(t.TempDir(), "store")
				if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(snapPath(dir, 50), int64(cut)); err != nil {
					t.Fatal(err)
				}
				log, _ := newTestLog(t)
				s, err := Open(dir, log)
				if err != nil {
					t.Fatalf("cut at %d of %d: Open: %v", cut, len(whole), err)
				}
				v := wantLog(t, s, 41, 60, term1)
				if v.snapIndex != 40 || v.snapData != "state@40" {
					t.Fatalf("cut at %d of %d: snapshot %d, want the one at 40", cut, len(whole), v.snapIndex)
				}
				if _, err := os.Stat(snapPath(dir, 50) + ".broken"); err != nil {
					t.Fatalf("cut at %d: the cut file was not set aside: %v", cut, err)
				}
				mustAppend(t, s, hardState(1, 1, 61), ents(61, 61, 1), nil)
				if err := s.SaveSnapshot(61, nil, []byte("state@61"), 0); err != nil {
					t.Fatal(err)
				}
				s = reopen(t, s)
				if v := wantLog(t, s, 62, 61, term1); v.snapIndex != 61 || v.snapData != "state@61" {
					t.Fatalf("cut at %d: after a new snapshot: %d %q", cut, v.snapIndex, v.snapData)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d cuts of a %d-byte file (pieces %v)", len(cuts), len(whole), pieces)
		})
	}
}

// TestSnapshotTornUnrecorded: a crash while writing a snapshot file, before
// its WAL record, leaves a cut file the WAL does not name. Open ignores it
// (the snapshot at 40 and the log from 41), and the store goes on taking
// snapshots over it.
func TestSnapshotTornUnrecorded(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir, "torn")
	for i := uint64(1); i <= 60; i++ {
		mustAppend(t, s, hardState(1, 1, i), ents(i, i, 1), nil)
		if i == 20 || i == 40 {
			if err := s.SaveSnapshot(i, confState(1, 2, 3), []byte("state@"+itoa(i)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	snap := &raftpb.Snapshot{Data: bytes.Repeat([]byte{7}, 3000), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(50)), Term: new(uint64(1)), ConfState: confState(1, 2, 3)}}
	if err := writeSnap(filepath.Join(dir, snapDirName), snap); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(snapPath(dir, 50), 1500); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir)
	if v := wantLog(t, s, 41, 60, term1); v.snapIndex != 40 {
		t.Fatalf("snapshot %d, want 40", v.snapIndex)
	}
	for i := uint64(61); i <= 90; i++ {
		mustAppend(t, s, hardState(1, 1, i), ents(i, i, 1), nil)
		if i%10 == 0 {
			if err := s.SaveSnapshot(i, nil, []byte("state@"+itoa(i)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	s = reopen(t, s)
	defer s.Close()
	if v := wantLog(t, s, 91, 90, term1); v.snapIndex != 90 || v.snapData != "state@90" {
		t.Fatalf("snapshot %d %q, want 90", v.snapIndex, v.snapData)
	}
}
