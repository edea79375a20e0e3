package fencingredis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingredis"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestSetGet: equal tokens pass, a lower one is refused with both tokens
// and changes nothing, a higher one raises the fence.
func TestSetGet(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	s := fencingredis.New(rdb, fencing.Limit{})

	if _, _, err := s.Get(ctx, key); !errors.Is(err, fencingredis.ErrNotFound) {
		t.Fatalf("Get of a new key: %v, want ErrNotFound", err)
	}
	mustSet(t, s, key, "a", 5)
	mustSet(t, s, key, "b", 5) // the same holder writes again
	err := s.Set(ctx, key, "stale", 4)
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) || se.Offered != 4 || se.Highest != 5 || se.Resource != key {
		t.Fatalf("token 4 after 5: %v, want a StaleError 4 < 5", err)
	}
	wantGet(t, s, key, "b", 5)
	mustSet(t, s, key, "c", 6)
	wantGet(t, s, key, "c", 6)
	if err := s.Set(ctx, key, "d", 5); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("token 5 after 6: %v, want ErrStale", err)
	}
	// What Redis holds: one hash, the fence a decimal string.
	if got, err := rdb.HGetAll(ctx, key).Result(); err != nil || len(got) != 2 || got["value"] != "c" || got["fence"] != "6" {
		t.Fatalf("the hash in Redis: %v %v, want value c, fence 6", got, err)
	}
}

// TestBadInput: an empty key is refused before anything reaches Redis; a
// key of another type is Redis's WRONGTYPE, not a stale token.
func TestBadInput(t *testing.T) {
	rdb := dbtest.Redis(t)
	ctx := t.Context()
	s := fencingredis.New(rdb, fencing.Limit{})
	if err := s.Set(ctx, "", "v", 1); !errors.Is(err, fencingredis.ErrInvalid) || !strings.Contains(err.Error(), "empty key") {
		t.Fatalf("Set with an empty key: %v, want ErrInvalid saying so", err)
	}
	if _, _, err := s.Get(ctx, ""); !errors.Is(err, fencingredis.ErrInvalid) {
		t.Fatalf("Get with an empty key: %v, want ErrInvalid", err)
	}
	key := dbtest.RedisKey(t, rdb)
	rdb.Set(ctx, key, "plain", 0)
	err := s.Set(ctx, key, "v", 1)
	if err == nil || errors.Is(err, fencing.ErrStale) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Set on a plain string key: %v, want WRONGTYPE", err)
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != "plain" {
		t.Fatalf("the plain key now holds %q", v)
	}
}

// TestLargeTokens: tokens are compared exactly over all of uint64; as Lua
// numbers (doubles) 2⁵³ and 2⁵³+1 are the same, and a stale token passes.
func TestLargeTokens(t *testing.T) {
	rdb := dbtest.Redis(t)
	ctx := t.Context()
	s := fencingredis.New(rdb, fencing.Limit{})
	for _, c := range []struct{ high, low uint64 }{
		{1<<53 + 1, 1 << 53},
		{^uint64(0), ^uint64(0) - 1},
		{10, 9}, // a digit more than the offered token
		{100, 99},
	} {
		key := dbtest.RedisKey(t, rdb)
		mustSet(t, s, key, "high", c.high)
		if err := s.Set(ctx, key, "low", c.low); !errors.Is(err, fencing.ErrStale) {
			t.Errorf("token %d after %d: %v, want ErrStale", c.low, c.high, err)
		}
		mustSet(t, s, key, "again", c.high)
		wantGet(t, s, key, "again", c.high)
	}
}

// TestLimit: Max is checked before the call, MaxJump in the script against
// the key's fence (with a carry across digits: 99995 + 5 = 100000).
func TestLimit(t *testing.T) {
	rdb := dbtest.Redis(t)
	ctx := t.Context()
	s := fencingredis.New(rdb, fencing.Limit{Max: 1 << 48, MaxJump: 5})
	key := dbtest.RedisKey(t, rdb)
	var th *fencing.TooHighError
	if err := s.Set(ctx, key, "forged", 1<<62); !errors.As(err, &th) || th.Ceiling != 1<<48 {
		t.Fatalf("token 1<<62 with Max 1<<48: %v, want a TooHighError with ceiling 1<<48", err)
	}
	mustSet(t, s, key, "first", 99995) // a new key: bounded by Max alone
	if err := s.Set(ctx, key, "jump", 100001); !errors.As(err, &th) || th.Ceiling != 100000 || th.Offered != 100001 {
		t.Fatalf("token 100001 over fence 99995 with MaxJump 5: %v, want a TooHighError with ceiling 100000", err)
	}
	wantGet(t, s, key, "first", 99995)
	mustSet(t, s, key, "next", 100000)
	wantGet(t, s, key, "next", 100000)
}

func mustSet(t *testing.T, s *fencingredis.Store, key, value string, token uint64) {
	t.Helper()
	if err := s.Set(context.Background(), key, value, token); err != nil {
		t.Fatalf("Set(%q, %d): %v", value, token, err)
	}
}

func wantGet(t *testing.T, s *fencingredis.Store, key, value string, fence uint64) {
	t.Helper()
	v, f, err := s.Get(context.Background(), key)
	if err != nil || v != value || f != fence {
		t.Fatalf("Get = %q, %d, %v; want %q, %d", v, f, err, value, fence)
	}
}

// op is one Set of the concurrent test: call and ret are positions on one
// counter shared by every writer, so "returned before the call" is exact.
type op struct {
	call, ret int64
	token     uint64
	value     string
	err       error
}

// TestConcurrentWriters: 16 writers, each writing many times with tokens
// drawn from a small range, so tokens collide, rise and fall. The history
// must show: every acknowledged write's token is ≥ every token acknowledged
// before its call started; every refusal names a fence above its token that
// a write which started before the refusal returned did offer; the final
// fence is the highest token offered and the value one of its writes'.
func TestConcurrentWriters(t *testing.T) {
	rdb, key := dbtest.RedisWithKey(t)
	ctx := t.Context()
	s := fencingredis.New(rdb, fencing.Limit{})
	seed := rand.Uint64()
	t.Logf("seed=%d", seed)

	const writers, perWriter = 16, 60
	var clock, grants atomic.Int64
	ops := make([][]op, writers)
	var wg sync.WaitGroup
	for w := range writers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			// Each writer plays a holder: it writes many times with its
			// grant's token, and now and then takes a new grant (a larger
			// token than every earlier one), so every write races holders
			// with equal, older and newer tokens.
			tok := uint64(grants.Add(1))
			for i := range perWriter {
				if rng.IntN(8) == 0 {
					tok = uint64(grants.Add(1))
				}
				o := op{token: tok, value: fmt.Sprintf("w%d-%d-t%d", w, i, tok)}
				o.call = clock.Add(1)
				o.err = s.Set(ctx, key, o.value, tok)
				o.ret = clock.Add(1)
				ops[w] = append(ops[w], o)
			}
		})
	}
	wg.Wait()

	var all []op
	for _, o := range ops {
		all = append(all, o...)
	}
	var acked, refused int
	var maxOffered uint64
	for _, o := range all {
		maxOffered = max(maxOffered, o.token)
		var se *fencing.StaleError
		switch {
		case o.err == nil:
			acked++
			for _, p := range all {
				if p.err == nil && p.ret < o.call && p.token > o.token {
					t.Errorf("write %s (token %d) acknowledged after write %s (token %d) had been", o.value, o.token, p.value, p.token)
				}
			}
		case errors.As(o.err, &se):
			refused++
			if se.Offered != o.token || se.Highest <= o.token {
				t.Errorf("write %s refused with %v", o.value, o.err)
			}
			offered := false
			for _, p := range all {
				offered = offered || p.token == se.Highest && p.call < o.ret && p.err == nil
			}
			if !offered {
				t.Errorf("write %s refused for fence %d, which no acknowledged write that started before its return offered", o.value, se.Highest)
			}
		default:
			t.Errorf("write %s: %v", o.value, o.err)
		}
	}
	v, fence, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if fence != maxOffered {
		t.Errorf("final fence %d, want the highest token offered, %d", fence, maxOffered)
	}
	if !strings.HasSuffix(v, "-t"+strconv.FormatUint(maxOffered, 10)) {
		t.Errorf("final value %q is not from a write with token %d", v, maxOffered)
	}
	if refused == 0 || acked == 0 {
		t.Errorf("%d acknowledged, %d refused: the run did not exercise both", acked, refused)
	}
	t.Logf("%d writes: %d acknowledged, %d refused as stale; final %q, fence %d", len(all), acked, refused, v, fence)
}

// The holder of token 34 writes; the paused holder of token 33 wakes up and
// is refused. (Runs against the Redis at 127.0.0.1:6379.)
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	key := "fence_example:totals:77"
	rdb.Del(ctx, key)
	defer rdb.Del(ctx, key)
	totals := fencingredis.New(rdb, fencing.Limit{Max: 1 << 48})

	fmt.Println(totals.Set(ctx, key, "41000", 33)) // A, token 33
	fmt.Println(totals.Set(ctx, key, "42000", 34)) // B took over: token 34
	err := totals.Set(ctx, key, "41500", 33)       // A wakes up
	fmt.Println(errors.Is(err, fencing.ErrStale), err)
	value, fence, _ := totals.Get(ctx, key)
	fmt.Println(value, fence)
	// Output:
	// <nil>
	// <nil>
	// true fencing: stale token for fence_example:totals:77: 33 < 34 (a newer holder has written; stop)
	// 42000 34
}
