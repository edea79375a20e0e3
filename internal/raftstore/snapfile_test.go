package raftstore

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// TestWriteSnapMatchesEtcd: writeSnap writes the very file etcd's
// Snapshotter.SaveSnap writes (name and bytes), and the Snapshotter and
// readSnap load it back whole: nil, empty, small and large data (several MiB, crossing
// no boundary of its own), conf states with learners and a joint config.
func TestWriteSnapMatchesEtcd(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	big := make([]byte, 5<<20+3)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	for _, tt := range []struct {
		name string
		snap *raftpb.Snapshot
	}{
		{"nil data", snapshotAt(7, 2, confState(1, 2, 3), "")},
		{"empty data", &raftpb.Snapshot{Data: []byte{}, Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(8)), Term: new(uint64(2)), ConfState: confState(1)}}},
		{"small data", snapshotAt(1<<40, 1<<33, confState(1, 2, 3), "fence-snap-1\nstate")},
		{"large data, learners, joint", &raftpb.Snapshot{Data: big, Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(123456)), Term: new(uint64(9)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, VotersOutgoing: []uint64{1, 2, 5}, AutoLeave: new(true)}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "nil data" {
				tt.snap.Data = nil
			}
			ours, theirs := t.TempDir(), t.TempDir()
			if err := writeSnap(ours, tt.snap); err != nil {
				t.Fatal(err)
			}
			if err := snap.New(zap.NewNop(), theirs).SaveSnap(tt.snap); err != nil {
				t.Fatal(err)
			}
			names := func(dir string) []string {
				es, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, e := range es {
					out = append(out, e.Name())
				}
				return out
			}
			a, b := names(ours), names(theirs)
			if len(a) != 1 || len(b) != 1 || a[0] != b[0] {
				t.Fatalf("files %v, etcd's %v", a, b)
			}
			got, _ := os.ReadFile(filepath.Join(ours, a[0]))
			want, _ := os.ReadFile(filepath.Join(theirs, b[0]))
			if !bytes.Equal(got, want) {
				t.Fatalf("file of %d bytes differs from etcd's of %d", len(got), len(want))
			}
			back, err := snap.New(zap.NewNop(), ours).Load()
			if err != nil || !bytes.Equal(back.GetData(), tt.snap.GetData()) || !proto.Equal(back.GetMetadata(), tt.snap.GetMetadata()) {
				t.Fatalf("Load: %v", err)
			}
			// readSnap reads etcd's file back whole, a nil data field as nil
			// and an empty one as empty (proto2 presence).
			mine, err := readSnap(theirs, tt.snap.GetMetadata())
			if err != nil || !bytes.Equal(mine.GetData(), tt.snap.GetData()) || (mine.Data == nil) != (tt.snap.Data == nil) || !proto.Equal(mine.GetMetadata(), tt.snap.GetMetadata()) {
				t.Fatalf("readSnap: %v", err)
			}
		})
	}
}
