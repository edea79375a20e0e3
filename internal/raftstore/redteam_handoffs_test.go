package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestPowerLossAfterUnsyncedCommit: the node writes commit-index-only hard
// states through SetHardState without an fsync (a follower's commit-only
// MsgApp, the leader's commit). A crash (SIGKILL: what reached the file;
// power loss: any prefix of it, the next record begun) after them must
// give back every entry the synced Append made durable, the vote
// SetHardState made (a new term or vote is synced all the same), and a
// commit index that is one of those written, never past the last entry;
// the next synced write makes the last commit index durable.
func TestPowerLossAfterUnsyncedCommit(t *testing.T) {
	setSegmentSize(t, 24<<10)
	orig := filepath.Join(t.TempDir(), "orig")
	s := mustCreate(t, orig, "lazy")
	defer s.Close()
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 5; i++ {
		ents = append(ents, ent(i, 2, fmt.Sprint("e", i)))
	}
	mustAppend(t, s, hardState(2, 1, 0), ents, nil)
	if err := s.SetHardState(hardState(3, 2, 0)); err != nil { // a vote: synced
		t.Fatal(err)
	}
	synced := filepath.Join(t.TempDir(), "synced") // what the disk surely holds now
	copyDir(t, orig, synced)
	durable := len(segmentRecords(t, lastSegment(t, synced)))
	for _, c := range []uint64{3, 5} {
		if err := s.SetHardState(hardState(3, 2, c)); err != nil {
			t.Fatal(err)
		}
	}
	all := filepath.Join(t.TempDir(), "all") // and with the unsynced tail
	copyDir(t, orig, all)
	recs := segmentRecords(t, lastSegment(t, all))
	t.Logf("%d of the 2 unsynced commit-only records reached the file (etcd's WAL buffers them)", len(recs)-durable)

	var lastCommit uint64
	for k := durable; k <= len(recs); k++ {
		for _, garbage := range []bool{false, true} {
			if garbage && k == len(recs) {
				continue
			}
			dir := filepath.Join(t.TempDir(), "cut")
			copyDir(t, all, dir)
			seg := lastSegment(t, dir)
			off := recs[k-1].end
			if err := os.Truncate(seg, off); err != nil {
				t.Fatal(err)
			}
			if garbage { // the next record began to reach the disk
				f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = f.Write([]byte{0x11, 0, 0, 0, 0, 0, 0, 0x84, 0xde, 0xad})
				f.Close()
			}
			got := mustOpen(t, dir)
			v := viewOf(t, got)
			got.Close()
			if v.first != 1 || v.last != 5 {
				t.Fatalf("%d records kept (garbage %v): log %d..%d, want 1..5", k, garbage, v.first, v.last)
			}
			for i := uint64(1); i <= 5; i++ {
				if v.terms[i] != 2 || v.data[i] != fmt.Sprint("e", i) {
					t.Fatalf("%d records kept: entry %d is %q/%d", k, i, v.data[i], v.terms[i])
				}
			}
			if v.hs.GetTerm() != 3 || v.hs.GetVote() != 2 {
				t.Fatalf("%d records kept: hard state %v: the vote of term 3 is lost", k, v.hs)
			}
			c := v.hs.GetCommit()
			if c != 0 && c != 3 && c != 5 || c < lastCommit {
				t.Fatalf("%d records kept: commit %d (a longer prefix kept %d)", k, c, lastCommit)
			}
			if !garbage {
				lastCommit = c
			}
		}
	}

	// The next synced write makes the commit index durable.
	mustAppend(t, s, nil, []*raftpb.Entry{ent(6, 3, "e6")}, nil)
	after := filepath.Join(t.TempDir(), "after")
	copyDir(t, orig, after)
	got := mustOpen(t, after)
	defer got.Close()
	if v := viewOf(t, got); v.last != 6 || v.hs.GetCommit() != 5 || v.hs.GetVote() != 2 {
		t.Fatalf("after a synced Append: log ..%d, hard state %v; want ..6, commit 5, vote 2", v.last, v.hs)
	}
}
