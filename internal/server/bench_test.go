package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// BenchmarkAcquireRelease measures acquire+release cycles through a real
// single-node server (raft, bbolt with fsync, gRPC over loopback). Each
// client has its own lease and lock, so the locks are uncontended.
// b.N counts cycles; cycles/s is reported.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			n := startNode(b, nil)
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
		})
	}
}
