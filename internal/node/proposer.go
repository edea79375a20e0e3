package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

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

// proposer packs concurrent commands into one raft entry each round.
// Callers queue commands (propose, proposeAll) and wait; the loop takes
// them in batches (next) while fewer than maxInflightBatches of its batches
// are unanswered, so that a batch fills up while the ones before it commit
// (one command alone when idle, hundreds under load), and answers a batch's
// callers when it applies the batch's entry. No goroutine stands between
// the callers and the loop, and a caller that finds the loop idle proposes
// its batch itself (kick).
type proposer struct {
	maxBatch int
	metrics  *metrics.Server
	ready    chan struct{} // cap 1: the queue has something
	// kick is called after commands were queued: the group's kick, which
	// takes them to raft on the caller's goroutine if the loop is idle, or
	// else signals ready (signal, until the group sets it). Set before the
	// first push.
	kick func()

	mu     sync.Mutex
	queue  []*proposal // guarded by mu, in arrival order
	closed error       // guarded by mu: the loop has ended; new proposals get this

	inflight int // the loop's: batches proposed and not yet answered
}

type proposal struct {
	cmd  fsm.Command
	done chan proposalResult // buffered, 1
	// also are renewals of the same lease that arrived while this one
	// waited in the queue: one Renew, applied after all of them arrived,
	// answers them all (a lease renewed later than asked is still renewed
	// no earlier than asked).
	also []*proposal
	// traced is set if the proposer's context held a span (trace.go).
	traced *proposalTrace
}

// answer delivers the result to the proposal and those sharing it.
func (pr *proposal) answer(out proposalResult) {
	pr.done <- out
	for _, o := range pr.also {
		o.done <- out
	}
}

type proposalResult struct {
	res    fsm.Result
	err    error
	traced *batchTrace // the batch's trace, if it had a traced command
}

// maxInflightBatches is how many batches may wait for their commit at once.
// One: the next batch fills while the one before commits. On this project's
// 2-core machine, where the members and the clients share the cores, one
// batch in flight instead of two took 9-10 % more renewals and uncontended
// cycles out of the same CPU (bigger entries: fewer raft messages, appends
// and fsyncs per command) and left contended handoffs and one client's
// latency as they were (peerbench, same run, 2026-12-02).
const maxInflightBatches = 1

// maxBatchBytes bounds the commands packed into one entry by size (a batch
// of large values stops early), so that an entry fits one raft message and
// one transport batch (internal/transport sends up to 64 MiB).
const maxBatchBytes = 4 << 20

// commandSize is about what cmd takes in an entry.
func commandSize(cmd *fsm.Command) int {
	return 64 + len(cmd.Name) + len(cmd.Value) + len(cmd.Owner) + len(cmd.Addr) + 8*len(cmd.Open)
}

func newProposer(maxBatch int, m *metrics.Server) *proposer {
	p := &proposer{maxBatch: maxBatch, metrics: m, ready: make(chan struct{}, 1)}
	p.kick = p.signal
	return p
}

// signal tells the loop that the queue has something.
func (p *proposer) signal() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// propose commits cmd through raft and returns its result. A ctx that ends
// after the command was queued yields ErrIndeterminate: it may still
// commit.
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
	queued := make([]*proposal, 0, len(cmds))
	var traced *proposalTrace // shared by the commands of this call
	if span := trace.SpanContextFromContext(ctx); span.IsValid() {
		traced = &proposalTrace{span: span, queued: time.Now()}
	}
	for i := range cmds {
		if out[i].err = validate(&cmds[i]); out[i].err == nil {
			prs[i] = &proposal{cmd: cmds[i], done: make(chan proposalResult, 1), traced: traced}
			queued = append(queued, prs[i])
		}
	}
	if err := p.push(queued); err != nil {
		for i, pr := range prs {
			if pr != nil {
				out[i].err = err
			}
		}
	} else {
		for i, pr := range prs {
			if pr == nil {
				continue
			}
			select {
			case out[i] = <-pr.done:
			case <-ctx.Done():
				out[i].err = fmt.Errorf("%w (%v)", ErrIndeterminate, ctx.Err())
			}
		}
	}
	if traced != nil {
		for i, pr := range prs {
			if pr != nil {
				traceCommand(ctx, pr, out[i])
			}
		}
	}
	return out
}

// push queues prs for the loop, or refuses them all if the loop has ended.
func (p *proposer) push(prs []*proposal) error {
	if len(prs) == 0 {
		return nil
	}
	p.mu.Lock()
	if err := p.closed; err != nil {
		p.mu.Unlock()
		return err
	}
	p.queue = append(p.queue, prs...)
	p.mu.Unlock()
	p.kick()
	return nil
}

// next returns the next batch's entry as a request that answers the
// batch's proposals when it finishes, or nil if the queue is empty or
// maxInflightBatches are unanswered. Called on the loop.
func (p *proposer) next() *request {
	if p.inflight >= maxInflightBatches {
		return nil
	}
	batch := p.gather()
	if len(batch) == 0 {
		return nil
	}
	cmds := make([]fsm.Command, len(batch))
	for i, pr := range batch {
		cmds[i] = pr.cmd
	}
	p.inflight++
	p.metrics.BatchSize.Observe(float64(len(batch)))
	start := time.Now()
	traced := traceOf(batch, start)
	return &request{data: fsm.EncodeBatch(nil, cmds), traced: traced, then: func(o outcome) {
		p.inflight--
		p.answer(batch, o, start, traced)
	}}
}

// gather takes a batch off the queue: the first command, then more up to
// maxBatch commands and about maxBatchBytes; renewals of one lease share one
// command (the first's also).
func (p *proposer) gather() []*proposal {
	p.mu.Lock()
	defer p.mu.Unlock()
	var batch []*proposal
	taken := 0 // proposals taken, shared renewals included: bounds the batch's work
	size := 0  // the batch's size, roughly: bounds the entry
	renewals := map[fsm.LeaseID]*proposal{}
	for taken < len(p.queue) && (taken == 0 || len(batch) < p.maxBatch && taken < 8*p.maxBatch && size < maxBatchBytes) {
		pr := p.queue[taken]
		taken++
		size += commandSize(&pr.cmd)
		if pr.cmd.Kind == fsm.KindRenew {
			if first := renewals[pr.cmd.Lease]; first != nil {
				first.also = append(first.also, pr)
				continue
			}
			renewals[pr.cmd.Lease] = pr
		}
		batch = append(batch, pr)
	}
	clear(p.queue[:taken])
	p.queue = p.queue[taken:]
	if len(p.queue) == 0 {
		p.queue = nil // let the backing array go
	}
	return batch
}

// answer answers a batch's proposals with its entry's outcome.
func (p *proposer) answer(batch []*proposal, o outcome, start time.Time, traced *batchTrace) {
	if traced != nil {
		traced.index = o.index
	}
	if o.err == nil {
		p.metrics.ApplyLatency.Observe(time.Since(start).Seconds())
		results, ok := o.result.([]fsm.Result)
		if ok && len(results) == len(batch) {
			for i, pr := range batch {
				pr.answer(proposalResult{res: results[i], traced: traced})
			}
			return
		}
		o.err = fmt.Errorf("entry refused by the state machine: %v", o.result)
	}
	for _, pr := range batch {
		pr.answer(proposalResult{err: o.err, traced: traced})
	}
}

// close refuses what is queued, and what comes later, with err. Called by
// the loop as it ends, after the core answered every batch it took.
func (p *proposer) close(err error) {
	p.mu.Lock()
	queue := p.queue
	p.queue, p.closed = nil, err
	p.mu.Unlock()
	for _, pr := range queue {
		pr.answer(proposalResult{err: err})
	}
}

// waiting reports whether a batch is queued and the loop may take it.
// Called on the loop.
func (p *proposer) waiting() bool {
	if p.inflight >= maxInflightBatches {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0
}
