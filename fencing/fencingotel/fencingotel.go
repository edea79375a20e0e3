// Package fencingotel puts what package fencing checked on the writer's
// OpenTelemetry span: the token, the lock it was issued for and the
// holder's lease, and an event for a write refused as stale. It lives
// apart from package fencing so that programs without OpenTelemetry do not
// import it.
//
//	obs := fencingotel.New(fencingmetrics.New(reg)) // or New(nil)
//	totals, _ := fencing.NewTable(fencing.TableConfig{..., Observer: obs})
//	err := totals.Update(ctx, db, lease.Token(), key, set) // ctx holds the span
//
// On the span in the write's context (if it records), each write sets:
//
//	fence.token      the token offered (0: a signed token that did not verify)
//	fence.lock.name  the lock it was issued for, when the table knows it
//	                 (a signed token's lock, or TableConfig.LockName of the key)
//	fence.lease      the holder's lease number (signed tokens only)
//	fencing.table    the table
//	fencing.mode     enforce, observe or off
//
// and a write whose token was older than the row's adds the event
// fencing.stale (fence.token.offered, fence.token.highest, fencing.refused:
// true in enforce mode, false when observe mode let it through); a token
// that enforce mode refused for what it is (above the limit, a bad
// signature) adds fencing.refused with fencing.reason (too_high,
// bad_signature). One span that makes several writes
// keeps the last write's attributes and every write's events.
package fencingotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/fencing"
)

// Observer implements fencing.WriteObserver on the writer's span, and
// passes every report on to the Observer it wraps.
type Observer struct{ next fencing.Observer }

// New returns an Observer that also reports to next (nil: to nobody else),
// such as a fencingmetrics.Observer. Safe for concurrent use if next is.
func New(next fencing.Observer) *Observer { return &Observer{next: next} }

// Stale passes a stale write on to the wrapped Observer.
func (o *Observer) Stale(table string, mode fencing.Mode, offered, highest fencing.Token) {
	if o.next != nil {
		o.next.Stale(table, mode, offered, highest)
	}
}

// Refused passes a refused token on to the wrapped Observer, if it takes
// refusals.
func (o *Observer) Refused(table string, mode fencing.Mode, err error) {
	if ro, ok := o.next.(fencing.RefusalObserver); ok {
		ro.Refused(table, mode, err)
	}
}

// Checked puts w on the span in ctx, then passes it on to the wrapped
// Observer, if it takes checked writes.
func (o *Observer) Checked(ctx context.Context, w fencing.CheckedWrite) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		annotate(span, w)
	}
	if wo, ok := o.next.(fencing.WriteObserver); ok {
		wo.Checked(ctx, w)
	}
}

// annotate sets w's attributes and events on span.
func annotate(span trace.Span, w fencing.CheckedWrite) {
	attrs := []attribute.KeyValue{
		attribute.Int64("fence.token", int64(w.Token)),
		attribute.String("fencing.table", w.Table),
		attribute.String("fencing.mode", w.Mode.String()),
	}
	if w.Lock != "" {
		attrs = append(attrs, attribute.String("fence.lock.name", w.Lock))
	}
	if w.Lease != 0 {
		attrs = append(attrs, attribute.Int64("fence.lease", int64(w.Lease)))
	}
	span.SetAttributes(attrs...)
	refused := w.Err != nil
	if s := w.Stale; s != nil {
		span.AddEvent("fencing.stale", trace.WithAttributes(
			attribute.Int64("fence.token.offered", int64(s.Offered)),
			attribute.Int64("fence.token.highest", int64(s.Highest)),
			attribute.Bool("fencing.refused", refused)))
		return
	}
	var reason string
	switch {
	case errors.Is(w.Err, fencing.ErrTooHigh):
		reason = "too_high"
	case errors.Is(w.Err, fencing.ErrBadSignature):
		reason = "bad_signature"
	default:
		return
	}
	span.AddEvent("fencing.refused", trace.WithAttributes(attribute.String("fencing.reason", reason)))
}
