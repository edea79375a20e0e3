package conformance

import (
	"context"
	"syscall"
	"time"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// scenario is one check of the client contract (docs/protocol.md).
type scenario struct {
	name string
	run  func(e *env)
}

var scenarios = []scenario{
	{"lost-acquire-reply", lostAcquireReply},
	{"lost-reply-of-every-mutating-call", lostReplyOfEveryMutatingCall},
	{"paused-holder", pausedHolder},
	{"deadline-counted-from-the-send-time", deadlineFromSendTime},
	{"leader-transfer-while-holding", func(e *env) { leaderChangeWhileHolding(e, (*cluster).transfer) }},
	{"leader-kill-while-holding", func(e *env) { leaderChangeWhileHolding(e, (*cluster).killLeader) }},
	{"leader-transfer-while-waiting", func(e *env) { leaderChangeWhileWaiting(e, (*cluster).transfer) }},
	{"leader-kill-while-waiting", func(e *env) { leaderChangeWhileWaiting(e, (*cluster).killLeader) }},
	{"renewal-stream-ended-by-server", renewalStreamEnded},
	{"malformed-request-on-a-shared-stream", malformedOnSharedStream},
	{"force-released-by-an-admin", forceReleased},
}

// held checks that the server has name granted to lease with token.
func (e *env) held(name string, lease, token uint64) {
	e.t.Helper()
	l := e.c.lockOnServer(name)
	if l.HolderLeaseNumber != lease || l.Token != token {
		e.t.Fatalf("on the server %s is held by lease %d with token %d; the client holds it by lease %d with token %d",
			name, l.HolderLeaseNumber, l.Token, lease, token)
	}
}

// free checks that nobody holds name on the server.
func (e *env) free(name string) {
	e.t.Helper()
	if l := e.c.lockOnServer(name); l.HolderLeaseNumber != 0 {
		e.t.Fatalf("on the server %s is still held, by lease %d (token %d)", name, l.HolderLeaseNumber, l.Token)
	}
}

// stillHeld checks that the client still lets its user use name.
func (e *env) stillHeld(name string) {
	e.t.Helper()
	if st := e.ad.status(name); !st.Held {
		e.t.Fatalf("the client gave up %s: %+v", name, st)
	}
	if ev, ok := e.ad.event(0); ok {
		e.t.Fatalf("the client reported %+v", ev)
	}
}

// direct dials the cluster with the Go client, around the relay (the
// other holder in a scenario).
func (e *env) direct(ttl time.Duration) *client.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, e.c.addrs(), client.WithInsecure(), client.WithTTL(ttl), client.WithOwner("conformance-harness"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// lostAcquireReply: the server grants, the reply is lost. The client must
// retry the same request and get that grant (§4): it holds exactly the
// grant the server made, and the server made one.
func lostAcquireReply(e *env) {
	leader := e.c.leader()
	grants := leader.metric(e.t, "fence_grants_total")
	e.f.loseNext(api.FenceService_Acquire_FullMethodName)
	got := e.ad.lock("lost-acquire", 5*time.Second)
	if n := e.f.seen(api.FenceService_Acquire_FullMethodName); n < 2 {
		e.t.Fatalf("the relay saw %d Acquire calls; the lost reply should have made the client retry", n)
	}
	e.held("lost-acquire", got.LeaseNumber, got.Token)
	if after := leader.metric(e.t, "fence_grants_total"); after != grants+1 {
		e.t.Fatalf("the server made %v grants for one lock call", after-grants)
	}
	e.ad.release("lost-acquire")
	e.free("lost-acquire")
}

// lostReplyOfEveryMutatingCall loses the first reply of CreateLease,
// Acquire, Release and Revoke: each is retried as the same request and
// acts once — one lease, one grant, released, revoked.
func lostReplyOfEveryMutatingCall(e *env) {
	leader := e.c.leader()
	leases, grants := leader.metric(e.t, "fence_active_leases"), leader.metric(e.t, "fence_grants_total")
	for _, m := range []string{api.FenceService_CreateLease_FullMethodName, api.FenceService_Acquire_FullMethodName,
		api.FenceService_Release_FullMethodName, api.FenceService_Revoke_FullMethodName} {
		e.f.loseNext(m)
	}
	got := e.ad.lock("lost-every", 5*time.Second)
	e.held("lost-every", got.LeaseNumber, got.Token)
	if n := leader.metric(e.t, "fence_active_leases"); n != leases+1 {
		e.t.Fatalf("%v leases were created for one lock call", n-leases)
	}
	e.ad.release("lost-every")
	e.free("lost-every")
	if rp := e.ad.do(map[string]any{"op": "close"}); !rp.OK {
		e.t.Fatalf("close: %+v", rp)
	}
	for _, m := range []string{api.FenceService_CreateLease_FullMethodName, api.FenceService_Acquire_FullMethodName,
		api.FenceService_Release_FullMethodName, api.FenceService_Revoke_FullMethodName} {
		if n := e.f.seen(m); n < 2 {
			e.t.Errorf("the relay saw %d calls of %s; its lost reply should have made the client retry", n, m)
		}
	}
	if n := leader.metric(e.t, "fence_grants_total"); n != grants+1 {
		e.t.Fatalf("%v grants for one lock call", n-grants)
	}
	deadline := time.Now().Add(5 * time.Second)
	for leader.metric(e.t, "fence_active_leases") != leases && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := leader.metric(e.t, "fence_active_leases"); n != leases {
		e.t.Fatalf("after close, %v leases live on (the revoke was not retried)", n-leases)
	}
}

// deadlineFirst checks §6 rule 2 for d: the client's deadline for name
// comes at least the margin (ttl/10) before the server's, sampled every
// 50 ms (an answer in flight is where a client that counts from the
// answer's arrival goes wrong: right after it lands).
func (e *env) deadlineFirst(name string, ttl, d time.Duration) {
	e.t.Helper()
	for end := time.Now().Add(d); ; {
		t0 := time.Now()
		st := e.ad.status(name)
		server := e.c.lockOnServer(name).TtlLeft.AsDuration() + time.Since(t0) // what the server had left at t0, or more
		client := time.Duration(st.DeadlineLeft) * time.Millisecond
		if !st.Held || client+ttl/10 > server+5*time.Millisecond {
			e.t.Fatalf("the client's lease has %v left, the server's at most %v: the client must stop at least ttl/10 (%v) first", client, server, ttl/10)
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pausedHolder: a holder paused past its TTL does not hold when it wakes,
// even before it hears from the server (§6 rule 3), while another holder
// has the lock with a larger token.
func pausedHolder(e *env) {
	const ttl = 2 * time.Second
	got := e.ad.lock("paused", ttl)
	e.deadlineFirst("paused", ttl, 0)
	e.ad.signal(syscall.SIGSTOP)
	other := e.direct(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := other.Lock(ctx, "paused") // granted once the paused holder's lease expired on the server
	if err != nil {
		e.ad.signal(syscall.SIGCONT)
		e.t.Fatal(err)
	}
	if l.Token() <= got.Token {
		e.t.Fatalf("the next holder's token %d is not above the paused holder's %d", l.Token(), got.Token)
	}
	e.ad.signal(syscall.SIGCONT)
	if st := e.ad.status("paused"); st.Held {
		e.t.Fatalf("a holder paused past its TTL still holds after waking (%+v) while another holds token %d", st, l.Token())
	}
	if ev, ok := e.ad.event(5 * time.Second); !ok || ev.Event != "ended" || ev.Name != "paused" {
		e.t.Fatalf("no ended event for the paused holder's lock (got %+v)", ev)
	}
}

// killLeader SIGKILLs the leader, waits for a new one and restarts the old
// one (it rejoins as a follower).
func (c *cluster) killLeader() {
	c.t.Helper()
	for _, m := range c.members { // else the kill may leave no quorum, and the failure would read "no leader"
		if m.ended() {
			c.t.Fatalf("before the kill: %s", m.state())
		}
	}
	old := c.leader()
	old.kill()
	c.leader()
	old.start(c.t)
}

// leaderChangeWhileHolding: renewals follow the leader (§2, §6), so a
// holder keeps its lock across a change of leader.
func leaderChangeWhileHolding(e *env, change func(*cluster)) {
	const ttl = 3 * time.Second
	got := e.ad.lock("change-holding", ttl)
	change(e.c)
	time.Sleep(2 * ttl) // renewals must have reached the new leader
	e.stillHeld("change-holding")
	e.held("change-holding", got.LeaseNumber, got.Token)
	e.ad.release("change-holding")
	e.free("change-holding")
}

// leaderChangeWhileWaiting: a waiting lock call survives a change of
// leader (the client retries it there) and is granted when the holder
// releases, with a larger token.
func leaderChangeWhileWaiting(e *env, change func(*cluster)) {
	other := e.direct(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := other.Lock(ctx, "change-waiting")
	if err != nil {
		e.t.Fatal(err)
	}
	pending := e.ad.send(map[string]any{"op": "lock", "name": "change-waiting", "ttl_ms": 3000, "wait": true, "timeout_ms": 30000})
	deadline := time.Now().Add(10 * time.Second)
	for e.c.lockOnServer("change-waiting").Waiters == 0 {
		if time.Now().After(deadline) {
			e.t.Fatal("the client's lock call never queued")
		}
		time.Sleep(20 * time.Millisecond)
	}
	change(e.c)
	if err := first.Release(ctx); err != nil {
		e.t.Fatal(err)
	}
	got := e.ad.wait(pending, 30*time.Second, "the waiting lock call")
	if !got.OK || got.Token <= first.Token() {
		e.t.Fatalf("the waiting lock call answered %+v after the holder (token %d) released", got, first.Token())
	}
	e.held("change-waiting", got.LeaseNumber, got.Token)
	e.ad.release("change-waiting")
}

// renewalStreamEnded: the server may end a renewal stream (§6 rule 8); the
// client opens another and the lease lives on.
func renewalStreamEnded(e *env) {
	const ttl = 1500 * time.Millisecond
	e.f.with(func(f *faults) { f.endStreams = 3 })
	got := e.ad.lock("stream-ended", ttl)
	time.Sleep(4 * ttl)
	e.stillHeld("stream-ended")
	e.held("stream-ended", got.LeaseNumber, got.Token)
	if n := e.f.seen(api.FenceService_KeepAlive_FullMethodName); n < 3 {
		e.t.Fatalf("the relay ended %d renewal streams, 3 were to be ended", n)
	}
}

// malformedOnSharedStream: an answer on the renewal stream to a request the
// client did not send (another lease's, malformed: ok=false with an error)
// is not the end of the client's lease (§6 rules 6, 7).
func malformedOnSharedStream(e *env) {
	const ttl = 1500 * time.Millisecond
	e.f.with(func(f *faults) { f.inject = 1 })
	got := e.ad.lock("shared-stream", ttl)
	time.Sleep(3 * ttl)
	var left int
	e.f.with(func(f *faults) { left = f.inject })
	if left != 0 {
		e.t.Fatal("the client opened no renewal stream to slip the malformed request into")
	}
	e.stillHeld("shared-stream")
	e.held("shared-stream", got.LeaseNumber, got.Token)
}

// forceReleased: an admin ends the grant (ForceRelease); the next renewal's
// held_tokens lack its token, and the client ends that lock (§6 rule 7).
func forceReleased(e *env) {
	const ttl = 1500 * time.Millisecond
	got := e.ad.lock("forced", ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.c.leader().api.ForceRelease(ctx, &api.ForceReleaseRequest{Name: "forced", Token: got.Token,
		RequestId: []byte("conformance-frc1"), Reason: "conformance: an admin ends the grant"}); err != nil {
		e.t.Fatal(err)
	}
	ev, ok := e.ad.event(2 * ttl)
	if !ok || ev.Event != "ended" || ev.Name != "forced" || ev.Kind != "revoked" {
		e.t.Fatalf("no ended event of kind revoked within two TTLs of the force-release (got %+v)", ev)
	}
	if st := e.ad.status("forced"); st.Held {
		e.t.Fatalf("the client still holds a force-released lock: %+v", st)
	}
}

// deadlineFromSendTime delays every renewal's answer by 600 ms: a client
// that counts its deadline from when an answer arrives would hold the lease
// past the server's expiry; counted from the send time (§6 rule 2) it ends
// at least the margin before it.
func deadlineFromSendTime(e *env) {
	const ttl = 3 * time.Second
	e.f.with(func(f *faults) { f.delayRenewals = 600 * time.Millisecond })
	e.ad.lock("slow-answers", ttl)
	e.deadlineFirst("slow-answers", ttl, ttl) // three renewals, each answered late
	if n := e.f.delayed(); n < 2 {
		e.t.Fatalf("%d renewal answers were delayed, at least 2 should have been", n)
	}
	e.ad.release("slow-answers")
}
