package server

import (
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// appliedFSM records the indexes it applied.
type appliedFSM struct {
	mu      sync.Mutex
	indexes []uint64
}

func (f *appliedFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.indexes = append(f.indexes, l.Index)
	return nil
}

func (f *appliedFSM) applied() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.indexes)
}

func (f *appliedFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, io.ErrUnexpectedEOF }
func (f *appliedFSM) Restore(io.ReadCloser) error         { return io.ErrUnexpectedEOF }

// TestFollowerCommitsOnlyVerifiedEntries pins the raft fix fence carries
// (third_party/raft, found by the chaos harness): a deposed leader holding
// entries it never committed (6 and 7, term 1) receives, from the new
// leader (term 2, whose log differs after 5), an AppendEntries that checks
// the log only up to 5 but says entries up to 9 are committed. Upstream
// hashicorp/raft v1.8.0 then commits min(9, its own last index 7) and
// applies 6 and 7 — entries no majority ever held — so the replicas'
// states diverge. Raft's rule is min(leaderCommit, last entry this request
// verified).
func TestFollowerCommitsOnlyVerifiedEntries(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "f", Address: "f"}, {ID: "L", Address: "L"}, {ID: "x", Address: "x"}}}
	logs, stable, snaps := raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	_, ft := raft.NewInmemTransport("f")
	_, lt := raft.NewInmemTransport("L")
	ft.Connect("L", lt)
	lt.Connect("f", ft)
	cfg := raft.DefaultConfig()
	cfg.LocalID = "f"
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Minute, time.Minute, time.Minute
	cfg.LogLevel = "off"
	if err := raft.BootstrapCluster(cfg, logs, stable, snaps, ft, conf); err != nil {
		t.Fatal(err)
	}
	var stale []*raft.Log // 2…5 were committed in term 1; 6 and 7 were not
	for i := uint64(2); i <= 7; i++ {
		stale = append(stale, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := logs.StoreLogs(stale); err != nil {
		t.Fatal(err)
	}
	fsm := &appliedFSM{}
	r, err := raft.NewRaft(cfg, fsm, logs, stable, snaps, ft)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()

	var resp raft.AppendEntriesResponse
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("L"), Addr: []byte("L")},
		Term: 2, PrevLogEntry: 5, PrevLogTerm: 1, LeaderCommitIndex: 9}
	if err := lt.AppendEntries("f", "f", req, &resp); err != nil {
		t.Fatal(err)
	}
	if !resp.Success {
		t.Fatalf("append entries refused: %+v", resp)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(fsm.applied(), 5) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // anything beyond 5 would be applied in the same pass
	got := fsm.applied()
	if !slices.Contains(got, 5) {
		t.Fatalf("applied %v: the verified entries 2…5 should be applied", got)
	}
	if slices.Contains(got, 6) || slices.Contains(got, 7) {
		t.Fatalf("applied %v: entries 6 and 7 were never committed (the new leader's log differs after 5)", got)
	}
}
