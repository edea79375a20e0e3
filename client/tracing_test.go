package client_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencehq/fence/client"
)

// TestTracingRenewAndRefusedTryLock: a traced client makes a root
// fence.client.renew span per renewal with the lease's number, and a
// TryLock refused because the lock is held ends its acquire span with an
// error; an untraced client makes none.
func TestTracingRenewAndRefusedTryLock(t *testing.T) {
	ts := startServer(t)
	rec := tracetest.NewSpanRecorder()
	traced := dial(t, ts.addr, client.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))), client.WithTTL(300*time.Millisecond))
	untraced := dial(t, ts.addr, client.WithTTL(300*time.Millisecond))
	held, err := untraced.Lock(ctxT(t, 5*time.Second), "busy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := traced.TryLock(ctxT(t, 5*time.Second), "busy"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of a held lock: %v, want ErrLocked", err)
	}
	l, err := traced.Lock(ctxT(t, 5*time.Second), "mine")
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		return out
	}
	waitFor(func() bool { return len(find("fence.client.renew")) >= 2 }) // TTL/3 = 100ms apart
	for _, s := range find("fence.client.renew") {
		if s.Parent().IsValid() || !slices.Contains(s.Attributes(), attribute.Int64("fence.lease", int64(l.LeaseNumber()))) ||
			s.Status().Code == codes.Error {
			t.Errorf("renew span: parent %v, attributes %v, status %v; want a root span of lease %d, no error",
				s.Parent().SpanID(), s.Attributes(), s.Status(), l.LeaseNumber())
		}
	}
	acquires := find("fence.client.acquire")
	if len(acquires) != 2 {
		t.Fatalf("%d acquire spans, want 2 (TryLock, Lock)", len(acquires))
	}
	refused := acquires[0]
	if refused.Status().Code != codes.Error || !slices.Contains(refused.Attributes(), attribute.Bool("fence.lock.wait", false)) ||
		!slices.Contains(refused.Attributes(), attribute.String("fence.lock.name", "busy")) {
		t.Errorf("refused TryLock's span: status %v, attributes %v; want an error, busy, wait=false", refused.Status(), refused.Attributes())
	}
	if err := held.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, s := range rec.Ended() {
		if slices.Contains(s.Attributes(), attribute.Int64("fence.lease", int64(held.LeaseNumber()))) {
			t.Errorf("the untraced client's lease is on span %s", s.Name())
		}
	}
}
