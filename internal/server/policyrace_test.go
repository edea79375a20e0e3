package server_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/policy"
)

// Red team, round 4: the policy reload that ends queued Acquires.

// reloadPolicies are the policy before the reload (alice may take a/) and
// after it (she may not).
func reloadPolicies() (before, after string) {
	before = strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1)
	return before, strings.Replace(before, "prefixes: [a/]", "prefixes: [c/]", 1)
}

func reloadTo(t *testing.T, pc *policyCluster, doc string) {
	t.Helper()
	if err := os.WriteFile(pc.policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pc.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
}

// Found by a red team (fixed): an Acquire that passed the policy check before a reload, but
// had not yet reached its wait loop (it was in v.apply, committing its
// queue entry through raft), takes policyReloaded() only after the reload
// closed the old channel: it never learns of the reload, stays queued,
// and is granted later to an identity the new policy refuses — the very
// outcome 92c4efe set out to stop. Impact: a revoked identity still gets
// locks it queued for around the reload (the window is a raft commit per
// Acquire, longer on a loaded or slow-disk leader). Fix: take the channel
// before the policy is judged (in the interceptor, or at the top of
// Acquire before apply), or judge stillPermitted once after apply and
// before every select.
func TestReloadWhileQueueingIsSeen(t *testing.T) {
	before, after := reloadPolicies()
	pc := startWithPolicy(t, before)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	ops, alice := pc.as("ops"), pc.as("alice")
	if l, err := alice.Lock(ctx, "a/warm"); err != nil { // her session exists before the race
		t.Fatal(err)
	} else {
		l.Release(ctx)
	}
	const n = 48
	for round := 0; round < 8; round++ {
		reloadTo(t, pc, before)
		var held []*client.Lease
		for i := range n {
			l, err := ops.Lock(ctx, fmt.Sprintf("a/r%d-%d", round, i))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got []string
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				actx, acancel := context.WithTimeout(ctx, 3*time.Second)
				defer acancel()
				if l, err := alice.Lock(actx, fmt.Sprintf("a/r%d-%d", round, i)); err == nil {
					mu.Lock()
					got = append(got, l.Name())
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(round) * 500 * time.Microsecond)
		reloadTo(t, pc, after) // alice loses a/
		time.Sleep(300 * time.Millisecond)
		for _, l := range held {
			l.Release(ctx)
		}
		wg.Wait()
		if len(got) > 0 {
			t.Fatalf("round %d: after the reload took a/ from alice, she was granted %d of her queued a/ locks: %v", round, len(got), got)
		}
	}
}

// Found by a red team (fixed): at a reload the handler returns PermissionDenied without looking
// at the outcome once more, and leaveWait cancels the wait only if it is
// still queued when it looks, then proposes KindCancelWait, which does
// nothing to a wait granted meanwhile. A grant that lands in between (the
// holder let go just then) stays with the lease: alice's Acquire says
// PermissionDenied, her client forgets the call (a definitive answer), yet
// her lease holds the lock and her session's renewals keep it held.
// Impact: a lock held by nobody who knows it, until the session ends —
// every other waiter blocks (for a long-lived client, for ever). Fix: after
// a refusal, settle it in one place: propose a command that cancels the
// wait or, if it was granted, releases that grant (or re-check waitOutcome
// and release a grant made, in leaveWait, before answering).
func TestReloadRefusalLeaksNoGrant(t *testing.T) {
	before, after := reloadPolicies()
	pc := startWithPolicy(t, before)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	ops, alice := pc.as("ops"), pc.as("alice")
	if l, err := alice.Lock(ctx, "a/warm"); err != nil {
		t.Fatal(err)
	} else {
		l.Release(ctx)
	}
	for round := 0; round < 40; round++ {
		reloadTo(t, pc, before)
		name := fmt.Sprintf("a/leak%d", round)
		held, err := ops.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			defer acancel()
			l, err := alice.Lock(actx, name)
			if err == nil {
				l.Release(ctx)
			}
			waited <- err
		}()
		waitQueued(t, ops, name, 1)
		released := make(chan struct{})
		go func() {
			held.Release(ctx)
			close(released)
		}()
		time.Sleep(time.Duration(round%8) * 100 * time.Microsecond)
		reloadTo(t, pc, after)
		err = <-waited
		<-released
		if status.Code(err) != codes.PermissionDenied && !strings.Contains(fmt.Sprint(err), "PermissionDenied") {
			continue // she got it first (and let go): no race this round
		}
		time.Sleep(100 * time.Millisecond) // the cancel of her wait has committed
		st, serr := ops.Status(ctx, name)
		if serr != nil {
			t.Fatal(serr)
		}
		if st.Held() {
			time.Sleep(6 * time.Second) // past the 5 s TTL: her session's renewals keep it
			if st2, err := ops.Status(ctx, name); err == nil && st2.Held() {
				t.Errorf("round %d: still held by lease #%d 6 s later (past the TTL)", round, st2.HolderLease)
			}
			t.Fatalf("round %d: alice's Acquire of %s ended PermissionDenied at the reload, yet the lock is held by lease #%d (%s): a grant nobody knows of",
				round, name, st.HolderLease, st.HolderOwner)
		}
	}
}
