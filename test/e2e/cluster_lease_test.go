package e2e

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// TestClusterPausedLeaderAcksNoRenewal: renewals stream straight to the
// leader every 20ms; the leader is SIGSTOPped until another node has been
// elected and a while longer, then resumed. No renewal sent after the pause
// began may be answered "renewed": the old leader cannot commit any more.
// Both sides are recorded: the client's sends and answers, and the moment
// the new leader was serving.
func TestClusterPausedLeaderAcksNoRenewal(t *testing.T) {
	c := newCluster(t, 3)
	old := c.leader()
	conn, err := grpc.NewClient(old.grpc, grpc.WithTransportCredentials(clientCreds(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fc := api.NewFenceServiceClient(conn)
	lease, err := fc.CreateLease(timeout(t, 5*time.Second), &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := fc.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		sentAt   = map[uint64]time.Time{}
		okAt     = map[uint64]time.Time{}
		answered int
	)
	recvDone := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			mu.Lock()
			answered++
			if r.Ok {
				okAt[r.Seq] = time.Now()
			}
			mu.Unlock()
		}
	}()
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for seq := uint64(1); ctx.Err() == nil; seq++ {
			mu.Lock()
			sentAt[seq] = time.Now()
			mu.Unlock()
			if stream.Send(&api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: seq}) != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond) // renewals flow normally first
	mu.Lock()
	okBefore := len(okAt)
	mu.Unlock()
	if okBefore == 0 {
		t.Fatal("no renewal succeeded before the pause")
	}

	stopped := time.Now()
	syscall.Kill(old.cmd.Process.Pid, syscall.SIGSTOP)
	var elected time.Time
	for deadline := time.Now().Add(15 * time.Second); elected.IsZero(); time.Sleep(5 * time.Millisecond) {
		for _, nd := range c.nodes {
			if nd != old && leads(nd.metrics) {
				elected = time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader while the old one was paused")
		}
	}
	time.Sleep(700 * time.Millisecond) // the old leader stays paused past the election
	resumed := time.Now()
	syscall.Kill(old.cmd.Process.Pid, syscall.SIGCONT)
	time.Sleep(1500 * time.Millisecond) // give it every chance to answer the queued renewals
	cancel()
	<-sendDone

	mu.Lock()
	defer mu.Unlock()
	sentDuringPause := 0
	for seq, at := range sentAt {
		if at.Before(stopped) {
			continue
		}
		if at.Before(resumed) {
			sentDuringPause++
		}
		if when, ok := okAt[seq]; ok {
			t.Errorf("renewal %d sent %v after the pause began was acknowledged %v after the new leader was serving",
				seq, at.Sub(stopped), when.Sub(elected))
		}
	}
	t.Logf("renewals acknowledged before the pause: %d; sent during the pause: %d; new leader serving %v after SIGSTOP; answers in all: %d",
		okBefore, sentDuringPause, elected.Sub(stopped).Round(time.Millisecond), answered)
	if sentDuringPause < 10 {
		t.Fatalf("only %d renewals were sent during the pause", sentDuringPause)
	}
}

// TestClusterLeaseUnderFrequentTransfers moves leadership every TTL/2 for
// four TTLs. A lease nobody renews must still expire within its TTL plus the
// stated bound (1.5 s here: elections, takeover slack and the tick); a lease
// renewed every TTL/3 by the client must never expire.
func TestClusterLeaseUnderFrequentTransfers(t *testing.T) {
	const ttl = 2 * time.Second
	const bound = 1500 * time.Millisecond
	c := newCluster(t, 3, "--lock-delay", "0")
	admin := c.dial()
	renewed := c.dial(client.WithTTL(ttl))
	kept, err := renewed.Lock(timeout(t, 10*time.Second), "kept")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dead, err := admin.LockDetached(timeout(t, 10*time.Second), "abandoned", ttl, false)
	if err != nil {
		t.Fatal(err)
	}
	var expiredAfter time.Duration
	stop := make(chan struct{})
	transfers := 0
	go func() {
		defer close(stop)
		for time.Since(start) < 4*ttl {
			time.Sleep(ttl / 2)
			if _, err := admin.TransferLeader(timeout(t, 5*time.Second), ""); err == nil {
				transfers++
			}
		}
	}()
	for {
		info, err := admin.Status(timeout(t, 5*time.Second), "abandoned")
		if err == nil && !info.Held() && expiredAfter == 0 {
			expiredAfter = time.Since(start)
		}
		select {
		case <-stop:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	if expiredAfter != 0 && expiredAfter < ttl {
		t.Errorf("the abandoned lease ended %v after it was taken, sooner than its TTL %v", expiredAfter, ttl)
	}
	if expiredAfter == 0 || expiredAfter > ttl+bound {
		t.Errorf("the abandoned lease (TTL %v) ended after %v (0 = never), bound %v", ttl, expiredAfter, ttl+bound)
	}
	if err := kept.Err(); err != nil {
		t.Errorf("the renewed lease was lost during transfers: %v", err)
	}
	info, err := admin.Status(timeout(t, 5*time.Second), "kept")
	if err != nil || info.Token != kept.Token() {
		t.Errorf("the renewed lease's lock: %+v %v", info, err)
	}
	t.Logf("transfers=%d (every %v); abandoned lease ended %v after it was taken (TTL %v); renewed lease held throughout; lease #%d",
		transfers, ttl/2, expiredAfter.Round(time.Millisecond), ttl, dead.LeaseNumber)
	if transfers < 5 {
		t.Fatalf("only %d leadership transfers happened", transfers)
	}
}
