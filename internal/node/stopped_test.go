package node

import (
	"context"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// TestStoppedLeaderIsNotReady: a leader whose raft loop stopped (a log
// write failed: a full or failing disk) leads no more. It must not go on
// answering Ready (/leaderz 200, the lessor active, LeadershipEnds open)
// with the status its loop last published: callers and load balancers
// would keep sending to a node whose raft is gone.
func TestStoppedLeaderIsNotReady(t *testing.T) {
	n := rtNode(t)
	defer n.Close()
	ends := n.LeadershipEnds()
	if err := n.store.Close(); err != nil { // the next log write fails, as on a dead disk
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := n.Propose(ctx, fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: fsm.LeaseID{1}, TTL: 10 * time.Second})
	if err == nil {
		t.Fatal("a proposal committed on a node whose log cannot be written")
	}
	select {
	case <-n.group.loopDone:
	case <-ctx.Done():
		t.Fatal("the raft loop goes on after a failed log write")
	}
	if n.Ready() {
		t.Error("the node still reports itself the ready leader after its raft loop stopped")
	}
	if n.lessor.isActive() {
		t.Error("the lessor's leader duties still run after the raft loop stopped")
	}
	select {
	case <-ends:
	default:
		t.Error("LeadershipEnds is not closed after the raft loop stopped")
	}
}
