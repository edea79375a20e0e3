package node

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing the raft path. A command proposed (Propose, ProposeAll) with a
// context that holds a span — the gRPC handler's, when the server traces —
// gets three child spans of it, made by that span's own TracerProvider on
// the proposing goroutine once the command is answered, from times the loop
// noted for its batch; the loop itself makes no span:
//
//	fence.raft.propose  queued until its batch left the queue for raft
//	fence.raft.commit   from then until the entry committed and its apply began
//	fence.raft.apply    the entry's apply (all the batch's commands)
//
// Attributes: fence.command (the command's kind), fence.raft.batch_size
// (commands in the entry), fence.raft.index and, on apply, fence.result
// (the state machine's code). Commands of one batch share the times of
// commit and apply. The command's trace id also goes into this node's audit
// lines for the events the command caused (audit.Event.TraceID); the other
// members do not know it. Without a span in the context (tracing off) a
// command costs one context lookup and the loop nothing.

// tracerName names the tracer of the raft path's spans.
const tracerName = "github.com/fencehq/fence/internal/node"

// proposalTrace is a traced proposal's span context and the time it was
// queued.
type proposalTrace struct {
	span   trace.SpanContext
	queued time.Time
}

// batchTrace is a traced batch's trace ids and times. The loop writes it;
// the batch's proposers read it after their answer, which the loop sends
// after writing it.
type batchTrace struct {
	ids                      []trace.TraceID // per command of the batch; zero: not traced
	size                     int             // commands in the entry
	index                    uint64          // the entry's, once answered
	taken, applying, applied time.Time       // left the queue; apply began; apply ended
}

// apply applies the batch's entry, noting when its apply began and ended.
// Called on the loop.
func (b *batchTrace) apply(sm stateMachine, index uint64, data []byte) any {
	b.applying = time.Now()
	res := sm.apply(index, data, b.ids)
	b.applied = time.Now()
	return res
}

// traceOf returns the trace of a proposal: its batch's, if any of the
// batch's proposals is traced, else nil. Called on the loop.
func traceOf(batch []*proposal, taken time.Time) *batchTrace {
	var b *batchTrace
	for i, pr := range batch {
		if pr.traced == nil {
			continue
		}
		if b == nil {
			b = &batchTrace{ids: make([]trace.TraceID, len(batch)), size: len(batch), taken: taken}
		}
		b.ids[i] = pr.traced.span.TraceID()
	}
	return b
}

// traceCommand records the spans of pr's command, answered with out, as
// children of the span in ctx (if it records).
func traceCommand(ctx context.Context, pr *proposal, out proposalResult) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return
	}
	tr := parent.TracerProvider().Tracer(tracerName)
	kind := attribute.String("fence.command", pr.cmd.Kind.String())
	span := func(name string, from, to time.Time, err error, attrs ...attribute.KeyValue) {
		_, s := tr.Start(ctx, name, trace.WithTimestamp(from), trace.WithAttributes(kind), trace.WithAttributes(attrs...))
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		}
		s.End(trace.WithTimestamp(to))
	}
	b := out.traced
	if b == nil || b.applying.IsZero() { // refused before raft, or given up on (ctx ended)
		span("fence.raft.propose", pr.traced.queued, time.Now(), out.err)
		return
	}
	size := attribute.Int("fence.raft.batch_size", b.size)
	index := attribute.Int64("fence.raft.index", int64(b.index))
	span("fence.raft.propose", pr.traced.queued, b.taken, nil, size)
	span("fence.raft.commit", b.taken, b.applying, nil, size, index)
	applied := []attribute.KeyValue{size, index}
	if out.err == nil {
		applied = append(applied, attribute.String("fence.result", out.res.Code.String()))
	}
	span("fence.raft.apply", b.applying, b.applied, out.err, applied...)
}
