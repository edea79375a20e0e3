package node

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/metrics"
)

// TestBatchBoundedBySize: large values end a batch early, so an entry stays
// within what one raft message and one transport batch carry (a batch of
// 1024 values of 1 MiB would be a 1 GiB entry that no follower ever gets).
func TestBatchBoundedBySize(t *testing.T) {
	p := &proposer{maxBatch: 1024}
	put := func() *proposal {
		return &proposal{cmd: fsm.Command{Kind: fsm.KindPut, Name: "k", Value: bytes.Repeat([]byte("v"), fsm.MaxValueLen), Token: 1}}
	}
	for range 21 {
		p.queue = append(p.queue, put())
	}
	batch := p.gather()
	size := 0
	for _, pr := range batch {
		size += len(pr.cmd.Value)
	}
	if size > maxBatchBytes+fsm.MaxValueLen {
		t.Fatalf("a batch of %d commands holds %d bytes of values; the bound is %d", len(batch), size, maxBatchBytes)
	}
	if len(batch) < 2 || len(p.queue) == 0 || len(batch)+len(p.queue) != 21 {
		t.Fatalf("batch of %d, %d left queued: want several commands, and the rest left for the next batch", len(batch), len(p.queue))
	}
}

// TestBatchSharesRenewals: renewals of one lease queued together become one
// command that answers them all; other commands keep their order.
func TestBatchSharesRenewals(t *testing.T) {
	p := &proposer{maxBatch: 1024}
	a, b := fsm.LeaseID{1}, fsm.LeaseID{2}
	renew := func(id fsm.LeaseID) *proposal { return &proposal{cmd: fsm.Command{Kind: fsm.KindRenew, Lease: id}} }
	first := renew(a)
	p.queue = []*proposal{first, renew(b), renew(a), renew(a)}
	batch := p.gather()
	if len(batch) != 2 || batch[0] != first || batch[1].cmd.Lease != b || len(first.also) != 2 {
		t.Fatalf("batch %d commands, first shares with %d: want [a (sharing 2), b]", len(batch), len(first.also))
	}
}

// TestProposerCloseAnswersQueued: when the loop ends, what it never took is
// answered with the loop's reason at once, and later proposals are refused
// with it instead of waiting for a loop that is gone.
func TestProposerCloseAnswersQueued(t *testing.T) {
	p := newProposer(1024, nil)
	queued := &proposal{cmd: fsm.Command{Kind: fsm.KindRenew, Lease: fsm.LeaseID{1}}, done: make(chan proposalResult, 1)}
	if err := p.push([]*proposal{queued}); err != nil {
		t.Fatal(err)
	}
	p.close(ErrStopped)
	select {
	case out := <-queued.done:
		if !errors.Is(out.err, ErrStopped) {
			t.Fatalf("queued proposal answered %v, want ErrStopped", out.err)
		}
	default:
		t.Fatal("a proposal queued when the loop ended was never answered")
	}
	out := p.proposeAll(context.Background(), []fsm.Command{{Kind: fsm.KindRenew, Lease: fsm.LeaseID{2}}})
	if !errors.Is(out[0].err, ErrStopped) {
		t.Fatalf("a proposal after the loop ended got %v, want ErrStopped", out[0].err)
	}
}

// TestProposerThrottlesBatches: the loop takes no batch while
// maxInflightBatches are unanswered, so the queue fills into one batch; an
// answer frees a slot.
func TestProposerThrottlesBatches(t *testing.T) {
	p := newProposer(1024, metrics.NewServer(prometheus.NewRegistry(), metrics.Gauges{}))
	renew := func(b byte) *proposal {
		return &proposal{cmd: fsm.Command{Kind: fsm.KindRenew, Lease: fsm.LeaseID{b}}, done: make(chan proposalResult, 1)}
	}
	var reqs []*request
	for i := range maxInflightBatches {
		if err := p.push([]*proposal{renew(byte(i))}); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, p.next())
	}
	for i := range 5 {
		if err := p.push([]*proposal{renew(byte(10 + i))}); err != nil {
			t.Fatal(err)
		}
	}
	if req := p.next(); req != nil || !func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.queue) == 5 }() {
		t.Fatalf("took a batch with %d unanswered", maxInflightBatches)
	}
	if p.waiting() {
		t.Fatal("waiting with every slot taken")
	}
	reqs[0].finish(outcome{result: []fsm.Result{{}}})
	if !p.waiting() {
		t.Fatal("not waiting after an answer freed a slot")
	}
	next := p.next()
	if next == nil {
		t.Fatal("no batch after an answer freed a slot")
	}
	cmds, err := fsm.DecodeBatch(next.data)
	if err != nil || len(cmds) != 5 {
		t.Fatalf("next batch: %d commands (%v), want the 5 queued", len(cmds), err)
	}
}
