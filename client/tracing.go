package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// tracerName names the tracer of the client's spans.
const tracerName = "github.com/fencehq/fence/client"

// Span names and attributes of the client (README, "Tracing").
const (
	spanAcquire = "fence.client.acquire" // Lock or TryLock, the wait included
	spanRelease = "fence.client.release"
	spanRelock  = "fence.client.relock" // Lease.Relock: the release and the wait for the new grant
	spanRenew   = "fence.client.renew"  // one renewal: sent until answered

	attrLock  = attribute.Key("fence.lock.name")
	attrWait  = attribute.Key("fence.lock.wait") // Lock (true) or TryLock (false)
	attrToken = attribute.Key("fence.token")
	attrLease = attribute.Key("fence.lease") // the lease's public number
)

// WithTracerProvider traces the client's calls with tp (OpenTelemetry): a
// span per Lock or TryLock (fence.client.acquire, from the call until the
// grant or the error, the local and the server-side wait included), per
// Release (fence.client.release) and per renewal (fence.client.renew, a
// root span: renewals run in the background), with the lock's name, the
// lease's number and the grant's token as attributes; and every call it
// sends carries the span's W3C trace context (traceparent metadata), so a
// server that traces continues the same trace. Give it to Dial.
//
// Without it the client makes no spans and sends no trace context: pass
// otel.GetTracerProvider() to use the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp == nil {
			o.tracer = nil
			return
		}
		o.tracer = tp.Tracer(tracerName)
	}
}

// startSpan starts a span of this client's tracer with the attributes
// attrs returns, or returns ctx and a span that records nothing when the
// client does not trace (then attrs is not called: untraced calls
// allocate nothing for tracing).
func (o *options) startSpan(ctx context.Context, name string, attrs func() []attribute.KeyValue) (context.Context, trace.Span) {
	if o.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background()) // a no-op span
	}
	return o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs()...))
}

// endSpan ends span with err's status (none on success).
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// leaseAttrs are the attributes of a granted lease.
func leaseAttrs(l *Lease) []attribute.KeyValue {
	return []attribute.KeyValue{attrToken.Int64(int64(l.token)), attrLease.Int64(int64(l.s.number))}
}

// propagator writes the W3C trace context into outgoing calls.
var propagator = propagation.TraceContext{}

// metadataCarrier lets the propagator write into gRPC metadata.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// withTraceContext returns ctx with the trace context of its span added to
// the outgoing metadata, if it has a span.
func withTraceContext(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md := metadata.MD{}
	propagator.Inject(ctx, metadataCarrier(md))
	for k, v := range md {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v[0])
	}
	return ctx
}

// tracingDialOptions send the trace context with every call.
func tracingDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(withTraceContext(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(withTraceContext(ctx), desc, cc, method, opts...)
		}),
	}
}
