package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/metrics"
)

// ErrInvalidCommand: a command the state machine would refuse to decode; it
// is refused alone instead of making its whole batch undecodable.
var ErrInvalidCommand = errors.New("invalid command")

// validate refuses, as ErrInvalidCommand, a command the state machine
// would not decode.
func validate(cmd *fsm.Command) error {
	if err := cmd.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	return nil
}

// proposer packs concurrent commands into one raft entry each round: while
// one batch is being committed the next one fills up, so the batch size
// adapts to the load (one command alone when idle, hundreds under load).
type proposer struct {
	group    *group
	in       chan *proposal
	maxBatch int
	inflight chan struct{} // slots for batches in flight
	metrics  *metrics.Server
	stop     chan struct{}
	done     chan struct{}
}

type proposal struct {
	cmd  fsm.Command
	done chan proposalResult // buffered, 1
	// taken: a batch holds it (set by the proposer's goroutine; read by
	// others only after that goroutine has ended).
	taken bool
	// also are renewals of the same lease that arrived while this one
	// waited in the batch: one Renew, applied after all of them arrived,
	// answers them all (a lease renewed later than asked is still renewed
	// no earlier than asked).
	also []*proposal
}

// answer delivers the result to the proposal and those sharing it.
func (pr *proposal) answer(out proposalResult) {
	pr.done <- out
	for _, o := range pr.also {
		o.done <- out
	}
}

type proposalResult struct {
	res fsm.Result
	err error
}

const maxInflightBatches = 2

// maxBatchBytes bounds the commands packed into one entry by size (a batch
// of large values stops early), so that an entry fits one raft message and
// one transport batch (internal/transport sends up to 64 MiB).
const maxBatchBytes = 4 << 20

// commandSize is about what cmd takes in an entry.
func commandSize(cmd *fsm.Command) int {
	return 64 + len(cmd.Name) + len(cmd.Value) + len(cmd.Owner) + len(cmd.Addr) + 8*len(cmd.Open)
}

func newProposer(g *group, maxBatch int, m *metrics.Server) *proposer {
	p := &proposer{group: g, in: make(chan *proposal, 8192), maxBatch: maxBatch,
		inflight: make(chan struct{}, maxInflightBatches), metrics: m,
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// propose commits cmd through raft and returns its result. A ctx that ends
// after the command was handed to raft yields ErrIndeterminate: it may
// still commit.
func (p *proposer) propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	out := p.proposeAll(ctx, []fsm.Command{cmd})[0]
	return out.res, out.err
}

// proposeAll commits cmds (they share raft entries, maxBatch a piece) and
// returns their outcomes in order, without a goroutine per command: a
// leader's duties of one tick (an expiry storm of many leases) go this way.
func (p *proposer) proposeAll(ctx context.Context, cmds []fsm.Command) []proposalResult {
	out := make([]proposalResult, len(cmds))
	prs := make([]*proposal, len(cmds))
	for i := range cmds {
		if err := validate(&cmds[i]); err != nil {
			out[i].err = err
			continue
		}
		pr := &proposal{cmd: cmds[i], done: make(chan proposalResult, 1)}
		select {
		case p.in <- pr:
			prs[i] = pr
			continue
		case <-ctx.Done():
			out[i].err = ctx.Err()
		case <-p.stop:
			out[i].err = ErrNotLeader
		}
		for j := i + 1; j < len(cmds); j++ { // never handed to raft
			out[j].err = out[i].err
		}
		break
	}
	for i, pr := range prs {
		if pr == nil {
			continue
		}
		select {
		case out[i] = <-pr.done:
		case <-p.done: // batching ended: a proposal no batch took never reached raft
			if pr.taken {
				out[i] = <-pr.done // its batch's outcome comes
			} else {
				out[i].err = ErrStopped
			}
		case <-ctx.Done():
			out[i].err = fmt.Errorf("%w (%v)", ErrIndeterminate, ctx.Err())
		}
	}
	return out
}

// gather makes a batch of first and what else is queued now: up to
// maxBatch commands and about maxBatchBytes; renewals of one lease share
// one command (the first's also).
func (p *proposer) gather(first *proposal) []*proposal {
	var batch []*proposal
	taken := 0 // proposals taken, shared renewals included: bounds the drain
	size := 0  // the batch's size, roughly: bounds the entry
	renewals := map[fsm.LeaseID]*proposal{}
	add := func(pr *proposal) {
		pr.taken = true
		taken++
		size += commandSize(&pr.cmd)
		if pr.cmd.Kind == fsm.KindRenew {
			if first := renewals[pr.cmd.Lease]; first != nil {
				first.also = append(first.also, pr)
				return
			}
			renewals[pr.cmd.Lease] = pr
		}
		batch = append(batch, pr)
	}
	add(first)
	for len(batch) < p.maxBatch && taken < 8*p.maxBatch && size < maxBatchBytes {
		select {
		case pr := <-p.in:
			add(pr)
		default:
			return batch
		}
	}
	return batch
}

func (p *proposer) run() {
	defer close(p.done)
	var buf []byte
	for {
		select {
		case p.inflight <- struct{}{}:
		case <-p.stop:
			return
		}
		var first *proposal
		select {
		case first = <-p.in:
		case <-p.stop:
			return
		}
		batch := p.gather(first)
		cmds := make([]fsm.Command, len(batch))
		for i, pr := range batch {
			cmds[i] = pr.cmd
		}
		buf = fsm.EncodeBatch(buf[:0], cmds)
		req := newRequest()
		req.data = append([]byte(nil), buf...)
		start := time.Now()
		select { // in order: batches reach the log in the order they were made
		case p.group.props <- req:
		case <-p.stop:
			for _, pr := range batch {
				pr.answer(proposalResult{err: ErrNotLeader})
			}
			<-p.inflight
			return
		}
		p.metrics.BatchSize.Observe(float64(len(batch)))
		go p.finish(req, batch, start)
	}
}

// finish waits for a batch's outcome and answers its proposals.
func (p *proposer) finish(req *request, batch []*proposal, start time.Time) {
	defer func() { <-p.inflight }()
	var o outcome
	select {
	case o = <-req.done:
	case <-p.group.stop:
		o.err = ErrIndeterminate
	case <-p.group.failed:
		o.err = ErrIndeterminate
	}
	if o.err == nil {
		p.metrics.ApplyLatency.Observe(time.Since(start).Seconds())
		results, ok := o.result.([]fsm.Result)
		if !ok {
			o.err = fmt.Errorf("entry refused by the state machine: %v", o.result)
		} else {
			for i, pr := range batch {
				pr.answer(proposalResult{res: results[i]})
			}
			return
		}
	}
	for _, pr := range batch {
		pr.answer(proposalResult{err: o.err})
	}
}

// close stops batching; calls in flight finish with their raft outcome.
func (p *proposer) close() {
	close(p.stop)
	<-p.done
}
