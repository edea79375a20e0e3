package cli

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// TestTraceFlagsRefused: bad tracing settings stop serve before it starts,
// with a message that names the flag.
func TestTraceFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--trace-sample-ratio", "1.5"}, "--trace-sample-ratio 1.5: give a fraction from 0 to 1"},
		{[]string{"--trace-sample-ratio", "-0.1"}, "--trace-sample-ratio -0.1"},
		{[]string{"--otlp-endpoint", "collector"}, `--otlp-endpoint "collector": give the collector's host:port`},
		{[]string{"--otlp-endpoint", "collector:0"}, `--otlp-endpoint "collector:0"`},
		{[]string{"--otlp-insecure"}, "--otlp-insecure: tracing is off without --otlp-endpoint"},
	} {
		code, _, errOut := fenceArgs(t, append([]string{"serve", "--print-config", "--data-dir", t.TempDir()}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, ExitUsage, tc.msg)
		}
	}
	if code, out, errOut := fenceArgs(t, "serve", "--print-config", "--otlp-endpoint", "127.0.0.1:4317", "--otlp-insecure", "--trace-sample-ratio", "0.25"); code != 0 ||
		!strings.Contains(out, "127.0.0.1:4317") || !strings.Contains(out, "0.25") {
		t.Errorf("good settings: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// collector is an OTLP/gRPC trace receiver that keeps the names of the
// spans it is sent and their resources' attributes.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu        sync.Mutex
	spans     []string
	resources []string // key=value
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			c.resources = append(c.resources, a.GetKey()+"="+a.GetValue().GetStringValue())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startCollector serves a collector on loopback.
func startCollector(t *testing.T) (*collector, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, c)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return c, lis.Addr().String()
}

// TestTracesReachCollector runs a node with serve's tracer provider
// pointed at an in-process OTLP collector: after a Lock and a Release,
// shutting the provider down delivers the handler and raft spans under
// the node's resource. With a sample ratio of 0, no span is sent.
func TestTracesReachCollector(t *testing.T) {
	for _, ratio := range []float64{1, 0} {
		col, addr := startCollector(t)
		settings := traceSettings{endpoint: addr, insecure: true, ratio: ratio}
		if err := settings.validate(); err != nil {
			t.Fatal(err)
		}
		tp, shutdown, err := settings.tracerProvider(t.Context(), "n7", locktest.Config(t.TempDir()).Logger)
		if err != nil {
			t.Fatal(err)
		}
		locktest.LockOnce(t.Context(), t, locktest.Start(t, func(c *server.Config) { c.TracerProvider = tp }), "exported")
		if err := shutdown(t.Context()); err != nil { // flushes
			t.Fatal(err)
		}
		col.mu.Lock()
		spans, resources := col.spans, col.resources
		col.mu.Unlock()
		if ratio == 0 {
			if len(spans) != 0 {
				t.Errorf("ratio 0: %d spans exported: %v", len(spans), spans)
			}
			continue
		}
		for _, want := range []string{"fence.v1.FenceService/Acquire", "fence.v1.FenceService/Release", "fence.raft.apply"} {
			if !slices.Contains(spans, want) {
				t.Errorf("no span %q exported: %v", want, spans)
			}
		}
		for _, want := range []string{"service.name=fence", "service.instance.id=n7"} {
			if !slices.Contains(resources, want) {
				t.Errorf("resource lacks %s: %v", want, resources)
			}
		}
	}
}
