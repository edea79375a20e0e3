package node

// Red team (proposer on the loop, inline follower writes). Each
// TestRedTeamEngine... test below was written against the uncommitted
// proposer and fails on it for the reason its comment gives.

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/metrics"
)

// FINDING (minor, a regression): with Config.MaxBatch 0 (the zero value;
// node.New neither refuses nor defaults it) no proposal is ever answered
// and the raft loop spins.
//
// gather's loop condition requires len(batch) < p.maxBatch even for the
// first proposal, so it takes nothing; next returns nil; waiting still
// reports a queued batch, so round re-signals p.ready and the loop comes
// straight back, forever (one core at 100%), while every Propose waits for
// its ctx and then reports ErrIndeterminate for a command that never
// reached raft. The old goroutine proposer always took the first proposal
// (add(first)) and so worked with 0. internal/server validates MaxBatch >= 1,
// but node.Config documents no such requirement.
func TestRedTeamEngineZeroMaxBatchNeverAnswers(t *testing.T) {
	g := func() float64 { return 0 }
	n, err := New(Config{Name: "rt", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0",
		TickInterval: 50 * time.Millisecond, SnapshotThreshold: 10000, TrailingLogs: 100,
		HeartbeatTimeout: 20 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		Clock: clock.Real{}, Metrics: metrics.NewServer(prometheus.NewRegistry(), metrics.Gauges{Leases: g, Locks: g, Waiters: g, IsLeader: g}),
		Logger: discard, RaftLogLevel: slog_off})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	cmd := fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{2}, Lease: fsm.LeaseID{3}, TTL: time.Minute, Owner: "o"}
	start := time.Now()
	_, err = n.Propose(pctx, cmd)
	if errors.Is(err, ErrIndeterminate) && time.Since(start) >= 2*time.Second {
		n.proposer.mu.Lock()
		queued := len(n.proposer.queue)
		n.proposer.mu.Unlock()
		cpu := func() time.Duration {
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		c0 := cpu()
		time.Sleep(500 * time.Millisecond) // the node is idle but for the queued proposal
		busy := cpu() - c0
		t.Fatalf("with MaxBatch 0 a proposal to a ready single-node leader was not answered in 2 s (%v); %d proposals still queued, and the idle node burnt %v of CPU in 500 ms: gather takes nothing when maxBatch is 0 and round re-signals p.ready forever",
			err, queued, busy.Round(time.Millisecond))
	}
}
