package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// BenchmarkAcquireRelease measures acquire+release cycles through a real
// single-node server (raft, bbolt with fsync, gRPC over loopback). Each
// client has its own lease and lock, so the locks are uncontended.
// b.N counts cycles; cycles/s is reported.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { acquireReleaseCycles(b, clients, nil) })
	}
}

// BenchmarkAcquireReleaseTraced is BenchmarkAcquireRelease with tracing on
// and every call sampled (a handler span and three raft spans per call,
// batched to an exporter that drops them): what tracing costs when on.
func BenchmarkAcquireReleaseTraced(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			acquireReleaseCycles(b, clients, func(c *Config) { c.TracerProvider = tp })
		})
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// acquireReleaseCycles runs b.N acquire+release cycles over clients
// leases of a node configured by conf, and reports cycles/s.
func acquireReleaseCycles(b *testing.B, clients int, conf func(*Config)) {
	n := startNode(b, conf)
	leases := make([][]byte, clients)
	for i := range leases {
		r, err := n.cli.CreateLease(context.Background(), &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = r.LeaseSecret
	}
	var wg sync.WaitGroup
	per := (b.N + clients - 1) / clients
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("bench/%d", i)
			for j := 0; j < per; j++ {
				seq := nextSeq() // this lease's calls go one at a time: each acknowledges the earlier ones
				if _, err := n.cli.Acquire(context.Background(), &api.AcquireRequest{RequestId: newReq(), Seq: seq, Ack: seq, LeaseSecret: leases[i], Name: name}); err != nil {
					b.Error(err)
					return
				}
				seq = nextSeq()
				if _, err := n.cli.Release(context.Background(), &api.ReleaseRequest{RequestId: newReq(), Seq: seq, Ack: seq, LeaseSecret: leases[i], Name: name}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*clients)/time.Since(start).Seconds(), "cycles/s")
}
