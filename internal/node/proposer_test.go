package node

import (
	"bytes"
	"testing"

	"github.com/fencehq/fence/internal/fsm"
)

// TestBatchBoundedBySize: large values end a batch early, so an entry stays
// within what one raft message and one transport batch carry (a batch of
// 1024 values of 1 MiB would be a 1 GiB entry that no follower ever gets).
func TestBatchBoundedBySize(t *testing.T) {
	p := &proposer{in: make(chan *proposal, 64), maxBatch: 1024}
	put := func() *proposal {
		return &proposal{cmd: fsm.Command{Kind: fsm.KindPut, Name: "k", Value: bytes.Repeat([]byte("v"), fsm.MaxValueLen), Token: 1}}
	}
	for range 20 {
		p.in <- put()
	}
	batch := p.gather(put())
	size := 0
	for _, pr := range batch {
		size += len(pr.cmd.Value)
	}
	if size > maxBatchBytes+fsm.MaxValueLen {
		t.Fatalf("a batch of %d commands holds %d bytes of values; the bound is %d", len(batch), size, maxBatchBytes)
	}
	if len(batch) < 2 || len(p.in) == 0 {
		t.Fatalf("batch of %d, %d left queued: want several commands, and the rest left for the next batch", len(batch), len(p.in))
	}
}

// TestBatchSharesRenewals: renewals of one lease queued together become one
// command that answers them all; other commands keep their order.
func TestBatchSharesRenewals(t *testing.T) {
	p := &proposer{in: make(chan *proposal, 64), maxBatch: 1024}
	a, b := fsm.LeaseID{1}, fsm.LeaseID{2}
	renew := func(id fsm.LeaseID) *proposal { return &proposal{cmd: fsm.Command{Kind: fsm.KindRenew, Lease: id}} }
	first := renew(a)
	p.in <- renew(b)
	p.in <- renew(a)
	p.in <- renew(a)
	batch := p.gather(first)
	if len(batch) != 2 || batch[0] != first || batch[1].cmd.Lease != b || len(first.also) != 2 {
		t.Fatalf("batch %d commands, first shares with %d: want [a (sharing 2), b]", len(batch), len(first.also))
	}
}
