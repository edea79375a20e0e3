package redislock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencehq/fence/client/redislock"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/dbtest"
)

// lockT takes name with TryLock and releases it when the test ends.
func lockT(t *testing.T, k *redislock.Locker, name string, opts ...redislock.Option) *redislock.Lease {
	t.Helper()
	l, err := k.TryLock(t.Context(), name, opts...)
	if err != nil {
		t.Fatalf("TryLock %q: %v", name, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// TestTryLockExcludes: a held key refuses every other TryLock, of another
// Locker or the same one; Release frees it at once; a second Release is nil.
func TestTryLockExcludes(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	a, b := redislock.New(rdb), redislock.New(rdb)

	la := lockT(t, a, key)
	for _, k := range []*redislock.Locker{a, b} {
		if l, err := k.TryLock(ctx, key); !errors.Is(err, redislock.ErrLocked) {
			t.Fatalf("TryLock of a held key: %v, %v; want ErrLocked", l, err)
		}
	}
	if err := la.Err(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	<-la.Done()
	if err := la.Err(); !errors.Is(err, redislock.ErrReleased) {
		t.Fatalf("Err after Release: %v, want ErrReleased", err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("the key is still there after Release")
	}
	lb := lockT(t, b, key)
	if err := lb.Err(); err != nil {
		t.Fatalf("the next holder: %v", err)
	}
}

// TestReleaseOnlyByTheHolder: the key passed to another holder while this
// one still trusted its lease (it expired in Redis early: a clock step on
// the Redis host, a failover). Release must leave the other holder's key
// alone and report the loss.
func TestReleaseOnlyByTheHolder(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	l := lockT(t, redislock.New(rdb, redislock.WithClock(clocktest.New())), key)
	rdb.Set(ctx, key, "another holder's value", time.Minute)

	err := l.Release(ctx)
	if !errors.Is(err, redislock.ErrExpired) || !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Release of a key another holder has: %v, want ErrExpired and ErrLost", err)
	}
	if v, err := rdb.Get(ctx, key).Result(); v != "another holder's value" {
		t.Fatalf("after the old holder's Release the key holds %q (%v), want the other holder's value", v, err)
	}
	<-l.Done()
}

// TestRenewalOnlyByTheHolder: a renewal that finds another holder's value
// must not extend that holder's key, and ends this lease.
func TestRenewalOnlyByTheHolder(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	clk := clocktest.New()
	l := lockT(t, redislock.New(rdb, redislock.WithClock(clk), redislock.WithTTL(30*time.Second)), key)
	rdb.Set(ctx, key, "another holder's value", 5*time.Second)
	before := l.Deadline()
	clk.Advance(10 * time.Second) // the first renewal
	for l.Err() == nil {
		if !l.Deadline().Equal(before) {
			t.Fatal("a renewal of a key another holder has succeeded")
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.Err(); !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", err)
	}
	if left, _ := rdb.PTTL(ctx, key).Result(); left > 5*time.Second {
		t.Fatalf("the other holder's key now has TTL %v: extended by the old holder", left)
	}
}

// TestRenewalKeepsItPastTTL: on a fake clock, renewals every TTL/3 keep the
// lease valid past its TTL, and each one resets the key's TTL in Redis (the
// test first shortens it to 5s, so only a PEXPIRE can bring it back up).
func TestRenewalKeepsItPastTTL(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	clk := clocktest.New()
	const ttl = 30 * time.Second
	l := lockT(t, redislock.New(rdb, redislock.WithClock(clk), redislock.WithTTL(ttl)), key)
	value, _ := rdb.Get(ctx, key).Result()

	for i := range 4 { // 4 × TTL/3 > TTL
		rdb.PExpire(ctx, key, 5*time.Second)
		before := l.Deadline()
		clk.Advance(ttl / 3)
		waitDeadlineMoves(t, l, before)
		if err := l.Err(); err != nil {
			t.Fatalf("after %d renewals: %v", i+1, err)
		}
		if left, _ := rdb.PTTL(ctx, key).Result(); left <= 5*time.Second {
			t.Fatalf("after renewal %d the key's TTL is %v: not renewed to %v", i+1, left, ttl)
		}
	}
	if got := l.Deadline().Sub(clk.Now()); got != ttl-ttl/10 {
		t.Fatalf("deadline %v after the last renewal was sent, want TTL − TTL/10 = %v", got, ttl-ttl/10)
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != value {
		t.Fatalf("the key's value changed: %q, was %q", v, value)
	}
}

// waitDeadlineMoves waits for a renewal to land (no time bound: the test's
// own deadline catches a hang).
func waitDeadlineMoves(t *testing.T, l *redislock.Lease, from time.Time) {
	t.Helper()
	for l.Deadline().Equal(from) {
		if err := l.Err(); err != nil {
			t.Fatalf("while waiting for a renewal: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLostKeyEndsLease: a renewal that finds the key gone (it expired in
// Redis, was deleted, was lost in a failover) ends the lease at once, before
// its deadline.
func TestLostKeyEndsLease(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	clk := clocktest.New()
	l := lockT(t, redislock.New(rdb, redislock.WithClock(clk), redislock.WithTTL(30*time.Second)), key)
	lctx := l.Context()
	rdb.Del(ctx, key)
	clk.Advance(10 * time.Second) // the first renewal
	<-l.Done()
	if err := l.Err(); !errors.Is(err, redislock.ErrExpired) || !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Err = %v, want ErrExpired and ErrLost", err)
	}
	<-lctx.Done()
	if cause := context.Cause(lctx); !errors.Is(cause, redislock.ErrLost) {
		t.Fatalf("the lease context's cause: %v, want ErrLost", cause)
	}
	if !l.Deadline().After(clk.Now()) {
		t.Fatal("the test passed the deadline: it should show the renewal, not the deadline, ending the lease")
	}
}

// TestPausedHolderEndsAtDeadline: the holder's process stands still past
// its deadline (modeled: boottime jumps a whole TTL at once, no renewal ran
// meanwhile). Its first look says expired, before any timer ran; Done and
// the Context close; Release still deletes the key, which is still its own.
func TestPausedHolderEndsAtDeadline(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	clk := clocktest.New()
	l := lockT(t, redislock.New(rdb, redislock.WithClock(clk), redislock.WithTTL(10*time.Second)), key)
	lctx := l.Context()
	clk.Suspend(10 * time.Second)
	if err := l.Err(); !errors.Is(err, redislock.ErrExpired) || errors.Is(err, redislock.ErrLost) {
		t.Fatalf("after a pause of a whole TTL: Err = %v, want ErrExpired (the deadline, not a lost key)", err)
	}
	<-l.Done()
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), redislock.ErrExpired) {
		t.Fatalf("the lease context's cause: %v", context.Cause(lctx))
	}
	if err := l.Release(ctx); !errors.Is(err, redislock.ErrExpired) {
		t.Fatalf("Release after the deadline: %v, want the lease's ErrExpired", err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("Release after the deadline left the holder's own key in place")
	}
}

// faulty is the real Redis with faults a test switches on: down fails
// every script call (renewals, Release); slow advances the fake clock by
// that much inside each script call and SET, as if the answer took that
// long; lostReply performs a SET and then reports an error, as if its
// answer was lost.
type faulty struct {
	*redis.Client
	clk       *clocktest.Fake
	down      atomic.Bool
	slow      atomic.Int64 // a time.Duration
	lostReply atomic.Bool
}

var errDown = errors.New("test: redis unreachable")

func (f *faulty) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.down.Load() {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errDown)
		return cmd
	}
	f.clk.Advance(time.Duration(f.slow.Load()))
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

func (f *faulty) SetNX(ctx context.Context, key string, value any, ttl time.Duration) *redis.BoolCmd {
	f.clk.Advance(time.Duration(f.slow.Load()))
	cmd := f.Client.SetNX(ctx, key, value, ttl)
	if f.lostReply.Load() {
		cmd.SetErr(errDown)
	}
	return cmd
}

func newFaulty(t *testing.T) (*faulty, string) {
	rdb, key := dbtest.RedisWithKey(t)
	return &faulty{Client: rdb, clk: clocktest.New()}, key
}

// TestDeadlineCountsFromTheSend: the deadline runs from when the SET or the
// renewal was sent, not from when its answer came: here each answer takes
// 5s of the lease's clock, and the deadline still lies TTL − TTL/10 after
// the send.
func TestDeadlineCountsFromTheSend(t *testing.T) {
	rdb, key := newFaulty(t)
	const ttl, slow = 30 * time.Second, 5 * time.Second
	rdb.slow.Store(int64(slow))
	start := rdb.clk.Now()
	l := lockT(t, redislock.New(rdb, redislock.WithClock(rdb.clk), redislock.WithTTL(ttl)), key)
	if got := l.Deadline().Sub(start); got != 27*time.Second {
		t.Fatalf("deadline %v after the SET was sent, want 27s (TTL − TTL/10; the 5s answer not counted)", got)
	}
	// The first renewal is due 10s after the SET was sent: 5s from now.
	before := l.Deadline()
	rdb.clk.Advance(5 * time.Second)
	waitDeadlineMoves(t, l, before)
	if got := l.Deadline().Sub(start); got != 37*time.Second {
		t.Fatalf("deadline %v after the SET was sent, want 37s (renewal sent at 10s + 27s)", got)
	}
}

// TestLostSetReplyGivesBack: a SET whose answer was lost may have taken the
// key; TryLock reports the error and deletes the key if it holds its value,
// so the lock is not taken for a whole TTL by nobody.
func TestLostSetReplyGivesBack(t *testing.T) {
	rdb, key := newFaulty(t)
	ctx := t.Context()
	rdb.lostReply.Store(true)
	if l, err := redislock.New(rdb).TryLock(ctx, key); !errors.Is(err, errDown) {
		t.Fatalf("TryLock with a lost reply: %v, %v; want the error", l, err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("the SET whose reply was lost left the key taken")
	}
}

// TestReleaseWithoutAnswer: a Release that Redis does not answer ends the
// lease here all the same (nothing renews the key; it expires within the
// TTL) and says so.
func TestReleaseWithoutAnswer(t *testing.T) {
	rdb, key := newFaulty(t)
	l := lockT(t, redislock.New(rdb, redislock.WithClock(rdb.clk)), key)
	rdb.down.Store(true)
	if err := l.Release(t.Context()); !errors.Is(err, errDown) {
		t.Fatalf("Release without an answer: %v, want the error", err)
	}
	<-l.Done()
	if err := l.Err(); !errors.Is(err, redislock.ErrExpired) {
		t.Fatalf("Err after an unanswered Release: %v, want ErrExpired", err)
	}
}

// TestJeopardyThenExpiry: renewals that fail put the lease in jeopardy (it
// still holds); at the deadline it ends, naming the last renewal error.
func TestJeopardyThenExpiry(t *testing.T) {
	rdb, key := newFaulty(t)
	clk := rdb.clk
	l := lockT(t, redislock.New(rdb, redislock.WithClock(clk), redislock.WithTTL(30*time.Second)), key)
	rdb.down.Store(true)
	clk.Advance(10 * time.Second) // the first renewal fails
	for l.Jeopardy() == nil {
		time.Sleep(time.Millisecond)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("in jeopardy the lease still holds: %v", err)
	}
	if !errors.Is(l.Jeopardy(), errDown) {
		t.Fatalf("Jeopardy = %v, want the renewal's error", l.Jeopardy())
	}
	// Renewals keep failing (every 250ms); the deadline is the SET's send
	// plus TTL − TTL/10 = 27s: valid a millisecond before, over at it.
	clk.Advance(17*time.Second - time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("1ms before the deadline: %v", err)
	}
	clk.Advance(time.Millisecond)
	<-l.Done()
	err := l.Err()
	if !errors.Is(err, redislock.ErrExpired) || !strings.Contains(err.Error(), errDown.Error()) {
		t.Fatalf("at the deadline: %v, want ErrExpired naming the renewal error", err)
	}
	if l.Jeopardy() != nil {
		t.Fatal("Jeopardy after the lease ended")
	}
	rdb.down.Store(false)
}

// TestLockWaits: Lock waits while the key is held and takes it once it is
// released; a Lock whose context ends gives up with the context's error.
func TestLockWaits(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	k := redislock.New(rdb, redislock.WithPoll(20*time.Millisecond))
	a := lockT(t, k, key)

	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.Lock(short, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with an ended context on a held key: %v, want context.Canceled", err)
	}

	got := make(chan *redislock.Lease)
	go func() {
		l, err := k.Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	defer b.Release(ctx)
	if err := b.Err(); err != nil {
		t.Fatalf("the waiter's lease: %v", err)
	}
}

// TestDo: fn runs under the lock, which is released afterwards; fn's error
// comes back.
func TestDo(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	k := redislock.New(rdb)
	errFn := errors.New("fn failed")
	err := k.Do(ctx, key, func(ctx context.Context) error {
		if _, err := k.TryLock(ctx, key); !errors.Is(err, redislock.ErrLocked) {
			t.Errorf("TryLock inside Do: %v, want ErrLocked", err)
		}
		return errFn
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("Do left the key behind")
	}
}

// TestBadInput: each bad argument is refused with ErrInvalid before
// anything reaches Redis.
func TestBadInput(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	k := redislock.New(rdb)
	for _, c := range []struct {
		name string
		key  string
		opts []redislock.Option
		want string
	}{
		{"empty name", "", nil, "empty lock name"},
		{"zero TTL", key, []redislock.Option{redislock.WithTTL(0)}, "TTL 0s"},
		{"sub-millisecond TTL", key, []redislock.Option{redislock.WithTTL(1500 * time.Microsecond)}, "whole number of milliseconds"},
		{"margin as long as the TTL", key, []redislock.Option{redislock.WithTTL(time.Second), redislock.WithSafetyMargin(time.Second)}, "shorter than the TTL"},
		{"negative margin", key, []redislock.Option{redislock.WithSafetyMargin(-time.Second)}, "negative"},
		{"zero poll", key, []redislock.Option{redislock.WithPoll(0)}, "poll interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := k.TryLock(ctx, c.key, c.opts...)
			if !errors.Is(err, redislock.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("TryLock: %v, want ErrInvalid saying %q", err, c.want)
			}
			if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
				t.Fatal("a refused TryLock set the key")
			}
		})
	}
}

// TestContention: 8 workers each take the lock 10 times with Lock (waiting,
// polling) and release it; no two are ever inside at once (the TTL is long,
// so no lease can expire here), and every turn is taken.
func TestContention(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	k := redislock.New(rdb, redislock.WithPoll(5*time.Millisecond))
	const workers, turns = 8, 10
	var inside, overlaps, done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range turns {
				l, err := k.Lock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				rdb.Get(ctx, key) // a round trip inside, to widen the window
				inside.Add(-1)
				done.Add(1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 || done.Load() != workers*turns {
		t.Fatalf("%d overlaps, %d turns taken of %d", overlaps.Load(), done.Load(), workers*turns)
	}
}
