package server

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"

	"github.com/fencehq/fence/api"
)

// untraced are the calls that get no server span: streams that live as
// long as a session or a watcher (one span of hours, and every renewal's
// raft spans under it, would say nothing per call).
// A Session stream's calls get a span each instead (session.go).
var untraced = map[string]bool{
	api.FenceService_KeepAlive_FullMethodName: true,
	api.FenceService_Watch_FullMethodName:     true,
	api.FenceService_Session_FullMethodName:   true,
}

// tracerName names the tracer of the spans the server starts itself (a
// Session stream's calls).
const tracerName = "github.com/fencehq/fence/internal/server"

// tracingHandler is the gRPC stats handler that gives each call but the
// untraced a server span from tp, the child of the caller's span when its
// metadata carries a W3C traceparent. The handler span is in the call's
// context, where internal/node finds it for the raft path's spans. Its
// metrics go nowhere: the server's own (internal/metrics) cover calls.
func tracingHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return !untraced[info.FullMethodName] }))
}
