package chaos

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// TestProxyCapturesSessionCalls: the Acquire and Release a client sends on
// its Session stream are captured as the unary calls they stand for, with
// their answers, so the replayer re-sends them as it does unary calls.
func TestProxyCapturesSessionCalls(t *testing.T) {
	srv := locktest.Start(t)
	captured := make(chan capture, 64)
	p, err := newProxy([]string{srv.GRPCAddr()}, captured, insecure.NewCredentials(), insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.addrs, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "captured")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]capture{}
	for len(seen) < 3 {
		select {
		case cp := <-captured:
			seen[cp.method] = cp
		case <-ctx.Done():
			t.Fatalf("captured %v, want CreateLease, Acquire and Release", seen)
		}
	}
	acq := seen[methodAcquire]
	var resp api.AcquireResponse
	if !acq.ok || proto.Unmarshal(acq.resp, &resp) != nil || resp.Token != l.Token() || requestID(methodAcquire, acq.req) == "" {
		t.Fatalf("the Acquire's capture %+v: want its request (with its id) and its answer (token %d)", acq, l.Token())
	}
	if rel := seen[methodRelease]; !rel.ok || requestID(methodRelease, rel.req) == "" {
		t.Fatalf("the Release's capture %+v", rel)
	}
}
