package node

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencehq/fence/internal/raftstore"
)

// BenchmarkSnapshotMemory measures what a node's snapshot of 1,000,000
// leases costs in memory: the encoding of the state, the member header, and
// the snapshot file written and fsynced through the raft log store, which
// keeps the snapshot for lagging followers as a node does. It reports the
// peak resident set of the process (VmHWM, reset just before) above what
// the state alone took (VmRSS after a full collection), and allocated
// bytes per snapshot (-benchmem). Run it alone:
//
//	go test ./internal/node -run XXX -bench SnapshotMemory -benchtime 3x -benchmem
func BenchmarkSnapshotMemory(b *testing.B) {
	r := &replica{state: millionish(b, 1_000_000)}
	dir := filepath.Join(b.TempDir(), "raft")
	store, err := raftstore.Create(dir, []byte("m"), discard)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var ents []*raftpb.Entry
	for i := uint64(1); i <= uint64(b.N); i++ {
		ents = append(ents, &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Type: new(raftpb.EntryType_EntryNormal)})
	}
	if err := store.Append(&raftpb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(b.N))}, ents, nil); err != nil {
		b.Fatal(err)
	}
	ms := members{RaftID("n1"): {Name: "n1", RaftAddr: "127.0.0.1:7302", ID: RaftID("n1")}}
	cs := &raftpb.ConfState{Voters: []uint64{RaftID("n1")}}
	runtime.GC()
	debug.FreeOSMemory()
	base := procStatus(b, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil { // VmHWM := VmRSS
		b.Skipf("cannot reset the peak RSS: %v", err)
	}
	b.ResetTimer()
	size := 0
	for i := range b.N {
		data := snapshotBytes(r, ms, removedSet{}, size+size/8) // as core.snapshotNow sizes it
		size = len(data)
		if err := store.SaveSnapshot(uint64(i+1), cs, data, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	peak := procStatus(b, "VmHWM")
	b.ReportMetric(float64(base)/(1<<20), "state-RSS-MiB")
	b.ReportMetric(float64(peak-base)/(1<<20), "peak-over-state-MiB")
}

// snapshotBytes is a node's snapshot of r with members ms: what
// core.snapshotNow queues for the append worker.
func snapshotBytes(r *replica, ms members, removed removedSet, sizeHint int) []byte {
	b, _ := snapshotData(ms, removed, r, sizeHint)
	return b
}

// procStatus returns a size field of /proc/self/status, in bytes.
func procStatus(b *testing.B, field string) int64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	for line := range bytes.Lines(st) {
		if rest, ok := bytes.CutPrefix(line, []byte(field+":")); ok {
			f := bytes.Fields(rest)
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
